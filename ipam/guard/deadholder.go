package guard

import (
	"context"

	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// settleDeadHolder releases holder, the record of another node that holds
// an address the delegate just gave this ADD, when that node is gone:
// Calico answered and has no Node of that name. kube-controllers
// frees a deleted node's addresses, and no DEL or GC of that node will
// ever come, so its record would fence the address for ever. Fencing
// blocks an ADD only on live evidence: any doubt (another datastore, an
// etcd that does not answer, a file store, which holds this node's
// records only) keeps the fence. It says whether the holder was released.
func (g *Guard) settleDeadHolder(ctx context.Context, holder *record.Record, cniPath string) bool {
	cluster, ok := g.store.(store.Cluster)
	if !ok || holder.Node == "" || holder.Node == g.node {
		return false
	}
	gone, err := g.nodeGone(ctx, holder.Node)
	if err != nil || !gone {
		if err != nil {
			g.log.Warn("cannot tell whether the holder's node is gone; fencing", "holder", holder.Attachment.String(), "node", holder.Node, "error", err)
		}
		return false
	}
	other := g.ForNode(holder.Node, cluster.ForNode(holder.Node))
	if err := other.Collect(ctx, holder, cniPath, other.DeadNodeRules()); err != nil {
		g.log.Warn("the holder's node is gone, but releasing its record failed; fencing", "holder", holder.Attachment.String(), "node", holder.Node, "error", err)
		return false
	}
	g.log.Warn("released the record of a node Calico no longer knows, which held an address Calico handed out again",
		"holder", holder.Attachment.String(), "node", holder.Node, "ips", holder.IPs)
	return true
}

// nodeGone asks Calico whether it has the Node called node.
func (g *Guard) nodeGone(ctx context.Context, node string) (bool, error) {
	known, err := g.calico.NodeKnown(ctx, node)
	return !known, err
}
