package guard

import (
	"context"

	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// settleDeadHolder releases holder, the record of another node that holds
// an address the delegate just gave this ADD, when that node is gone:
// kube-controllers frees a deleted node's addresses, and no DEL or GC of
// that node will ever come, so its record would fence the address for
// ever. The node's death is judged by the rulebook as the dead-node sweep
// judges it: Calico has no Node of that name now, and a sweep found it
// gone at least a grace before (one sighting is never enough). Fencing
// blocks an ADD only on live evidence, but any doubt (another datastore,
// an etcd that does not answer, a file store, which holds this node's
// records only, a node not yet found gone twice) keeps the fence; the
// sweep releases the holder later. It says whether the holder was
// released.
func (g *Guard) settleDeadHolder(ctx context.Context, holder *record.Record, cniPath string) bool {
	cluster, ok := g.store.(store.Cluster)
	if !ok || holder.Node == "" || holder.Node == g.node {
		return false
	}
	death, err := g.death(ctx, cluster, holder.Node)
	if err != nil {
		g.log.Warn("cannot tell whether the holder's node is gone; fencing", "holder", holder.Attachment.String(), "node", holder.Node, "error", err)
		return false
	}
	other := g.ForNode(holder.Node, cluster.ForNode(holder.Node))
	w := other.DeadNodeWitness(death)
	// chaos:dead-node-fences (a mutant breaks what follows)
	if v := w.Judge(holder); !v.Release {
		g.log.Info("the holder is kept; fencing", "holder", holder.Attachment.String(), "node", holder.Node, "why", v.Why)
		return false
	}
	if err := other.Collect(ctx, holder, cniPath, w); err != nil {
		g.log.Warn("the holder's node is gone, but releasing its record failed; fencing", "holder", holder.Attachment.String(), "node", holder.Node, "error", err)
		return false
	}
	g.log.Warn("released the record of a node Calico no longer knows, which held an address Calico handed out again",
		"holder", holder.Attachment.String(), "node", holder.Node, "ips", holder.IPs)
	if err := store.ForgetGoneOnceEmpty(ctx, cluster, g.cfg.Network, holder.Node); err != nil {
		g.log.Warn("the sweeps' note of the gone node stays for the next sweep to forget", "node", holder.Node, "error", err)
	}
	return true
}

// death is the evidence about node: whether Calico knows it now, and what
// the sweeps noted of it.
func (g *Guard) death(ctx context.Context, cluster store.Cluster, node string) (*rulebook.Death, error) {
	known, err := g.calico.NodeKnown(ctx, node)
	if err != nil {
		return nil, err
	}
	// chaos:add-settles-on-one-sighting (a mutant breaks what follows)
	d := &rulebook.Death{Known: known}
	if known {
		return d, nil
	}
	seen, err := cluster.Sightings(ctx, g.cfg.Network)
	if err != nil {
		return nil, err
	}
	if sg, ok := seen[node]; ok && !sg.Legacy {
		d.Noted, d.Since, d.Grace, d.Passed = true, sg.Since, sg.Grace, sg.Passed
	}
	return d, nil
}
