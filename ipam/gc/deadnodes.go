package gc

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/retention"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// A record of a node that is gone fences its addresses for ever: no DEL or
// GC of that node will come, while Calico frees a deleted node's addresses
// (kube-controllers does, once Calico's Node is gone) and hands them out
// again, and every ADD given one fails. gc --dead-nodes releases the
// records, and their quarantines, of every node Calico's datastore answers
// it does not know: the evidence kube-controllers acts on. A datastore that
// does not answer is no evidence: nothing is released.

// ErrNodeLocalStore means the records are in a file store, which holds
// one node's records: a dead node's went with it.
var ErrNodeLocalStore = errors.New("the file store holds this node's records only: a dead node's records went with it")

// DeadPlan is what gc --dead-nodes would release.
type DeadPlan struct {
	// Release are the records of nodes that are gone, by node.
	Release map[string][]*record.Record
	rules   retention.Rules
	cluster store.Cluster // the store the records were listed from
}

// Len is how many records the plan releases.
func (p *DeadPlan) Len() int {
	n := 0
	for _, recs := range p.Release {
		n += len(recs)
	}
	return n
}

// PlanDeadNodes lists every node's records of the network and asks ds of
// each other node whether Calico knows it. Every read error is an error,
// and the plan is then empty.
func (n *Node) PlanDeadNodes(ctx context.Context, ds datastore.Datastore) (*DeadPlan, *Report, error) {
	cluster, ok := n.store.(store.Cluster)
	if !ok {
		return nil, nil, ErrNodeLocalStore
	}
	recs, err := cluster.ListEveryNode(ctx, n.Network)
	if err != nil {
		return nil, nil, err
	}
	r := &Report{Network: n.Network, Node: n.Name, Liveness: "Calico's Nodes (" + ds.Kind() + ")", Records: len(recs)}
	byNode := map[string][]*record.Record{}
	for _, rec := range recs {
		switch {
		case rec.Node == "":
			// A record that does not decode names no node: asking Calico
			// for node "" would plan it as a gone node's, or fail the round.
			r.Kept = append(r.Kept, entry(rec, "damaged (it does not decode), so it names no node and no node's death is evidence against it: skipped; its own node's DEL or GC releases it"))
		case rec.Node != n.Name:
			byNode[rec.Node] = append(byNode[rec.Node], rec)
		}
	}
	never := func(string, string) bool { return false }
	p := &DeadPlan{Release: map[string][]*record.Record{}, rules: n.guard.GCRules(never, false), cluster: cluster}
	for _, node := range sortedKeys(byNode) {
		known, err := ds.NodeExists(ctx, node)
		if err != nil {
			return nil, nil, fmt.Errorf("is node %s gone? %w; nothing is released", node, err)
		}
		for _, rec := range byNode[node] {
			why := p.rules.Why(rec)
			switch {
			case known:
				r.Kept = append(r.Kept, entry(rec, "node "+node+" is known to Calico"))
			case why != "":
				r.Kept = append(r.Kept, entry(rec, why))
			default:
				p.Release[node] = append(p.Release[node], rec)
				r.Release = append(r.Release, entry(rec, "node "+node+" is gone: Calico has no Node "+node))
			}
		}
	}
	return p, r, nil
}

// ApplyDeadNodes releases the plan's records as the GC verb does, each
// through a Guard over its own node's keys, going on past errors.
func (n *Node) ApplyDeadNodes(ctx context.Context, p *DeadPlan, r *Report) error {
	var errs []error
	for _, node := range sortedKeys(p.Release) {
		g := n.guard.ForNode(node, p.cluster.ForNode(node))
		for _, rec := range p.Release[node] {
			if err := g.Collect(ctx, rec, n.CNIPath, p.rules); err != nil {
				errs = append(errs, err)
			}
		}
	}
	err := joinErrors(errs)
	ok := err == nil
	r.Applied = &ok
	if err != nil {
		r.Error = err.Error()
	}
	return err
}

func sortedKeys(m map[string][]*record.Record) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
