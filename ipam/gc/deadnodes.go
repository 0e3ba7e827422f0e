package gc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

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
// does not answer is no evidence: nothing is released. As kube-controllers
// does, a node's records go only once two sweeps found it gone, at least a
// grace period apart: a node missing from one listing (re-registering, a
// datastore restored from an older backup) loses nothing. The sweeps note
// what they found in the store (store.Sweeps), so a new leader, or a run
// by hand, goes on from the last sweep.
//
// A sweep reads, per cluster: the record keys of the network (keys alone),
// Calico's Nodes in one listing, the notes, and the records of the nodes
// found gone alone: nothing per known node.

// ErrNodeLocalStore means the records are in a file store, which holds
// one node's records: a dead node's went with it.
var ErrNodeLocalStore = errors.New("the file store holds this node's records only: a dead node's records went with it")

// DefaultDeadNodeGrace is how long after the sweep that first found a node
// gone a later sweep may release its records: a little less than the
// DaemonSet's period (5 minutes), so that its next sweep does.
const DefaultDeadNodeGrace = 4 * time.Minute

// DeadPlan is what gc --dead-nodes would release.
type DeadPlan struct {
	// Release are the records of nodes that are gone, by node.
	Release map[string][]*record.Record
	// notes are what the sweep found, by node: gone since then, or back
	// (zero) and its note to forget. NoteSweep writes them: a dry run
	// writes nothing.
	notes   map[string]time.Time
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

// sweep is one PlanDeadNodes: what it read, and the plan and report it
// builds.
type sweep struct {
	node    *Node
	cluster store.Cluster
	known   map[string]bool
	gone    map[string]time.Time
	now     time.Time
	grace   time.Duration
	plan    *DeadPlan
	report  *Report
}

// PlanDeadNodes counts every node's records of the network and lists
// Calico's Nodes once; the records of a node Calico does not know are
// released when an earlier sweep, at least grace before, found it gone
// too. The plan notes each node it finds gone, and forgets the notes of
// nodes that came back or have no records left, for NoteSweep to write.
// Every read error is an error, and the plan is then empty.
func (n *Node) PlanDeadNodes(ctx context.Context, ds datastore.Datastore, grace time.Duration) (*DeadPlan, *Report, error) {
	cluster, ok := n.store.(store.Cluster)
	if !ok {
		return nil, nil, ErrNodeLocalStore
	}
	counts, err := cluster.RecordCounts(ctx, n.Network)
	if err != nil {
		return nil, nil, err
	}
	names, err := ds.Nodes(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("which nodes are gone? %w; nothing is released", err)
	}
	gone, err := cluster.GoneSince(ctx, n.Network)
	if err != nil {
		return nil, nil, err
	}
	rules := n.guard.DeadNodeRules()
	sw := &sweep{node: n, cluster: cluster, known: map[string]bool{}, gone: gone, now: time.Now(), grace: grace,
		plan:   &DeadPlan{Release: map[string][]*record.Record{}, notes: map[string]time.Time{}, rules: rules, cluster: cluster},
		report: &Report{Network: n.Network, Node: n.Name, Liveness: "Calico's Nodes (" + ds.Kind() + ")"}}
	for _, name := range names {
		sw.known[name] = true
	}
	for _, node := range sortedKeys(counts) {
		sw.report.Records += counts[node]
		if err := sw.judge(ctx, node, counts[node]); err != nil {
			return nil, nil, err
		}
	}
	sw.forgetRest(counts)
	return sw.plan, sw.report, nil
}

// judge decides about the records of node, count of them.
func (sw *sweep) judge(ctx context.Context, node string, count int) error {
	since, noted := sw.gone[node]
	switch {
	case node == sw.node.Name:
		return nil // this node's own records are the liveness source's
	case sw.known[node]:
		sw.report.KeptUnread += count
		if noted {
			sw.plan.notes[node] = time.Time{}
		}
		return nil
	case !noted:
		return sw.keep(ctx, node, "node "+node+" is gone, found so first now: a sweep "+sw.grace.String()+" or more later releases its records", true)
	case sw.now.Sub(since) < sw.grace:
		return sw.keep(ctx, node, "node "+node+" is gone since "+since.Format(time.RFC3339)+": a sweep "+sw.grace.String()+" or more after that releases its records", false)
	}
	recs, err := sw.cluster.ForNode(node).List(ctx, sw.node.Network)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.Node == "" {
			// A record that does not decode names no node: no node's death
			// is evidence against it.
			sw.report.Kept = append(sw.report.Kept, entry(rec, "damaged (it does not decode), so it names no node and no node's death is evidence against it: skipped; its own node's DEL or GC releases it"))
			continue
		}
		if why := sw.plan.rules.Why(rec); why != "" {
			sw.report.Kept = append(sw.report.Kept, entry(rec, why))
			continue
		}
		sw.plan.Release[node] = append(sw.plan.Release[node], rec)
		sw.report.Release = append(sw.report.Release, entry(rec, "node "+node+" is gone: Calico has no Node "+node))
	}
	return nil
}

// keep lists node's records as kept for why, noting the node gone first.
func (sw *sweep) keep(ctx context.Context, node, why string, note bool) error {
	if note {
		sw.plan.notes[node] = sw.now
	}
	recs, err := sw.cluster.ForNode(node).List(ctx, sw.node.Network)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		sw.report.Kept = append(sw.report.Kept, entry(rec, why))
	}
	return nil
}

// forgetRest forgets the notes of nodes without records: released, or
// forgotten by uninstall.
func (sw *sweep) forgetRest(counts map[string]int) {
	for node := range sw.gone {
		if counts[node] == 0 {
			sw.plan.notes[node] = time.Time{}
		}
	}
}

// NoteSweep writes what the plan's sweep found: the nodes it found gone
// first, and the notes to forget. A dry run does not call it, so that it
// writes nothing to the store (the next sweep that applies notes them).
func (n *Node) NoteSweep(ctx context.Context, p *DeadPlan) error {
	for _, node := range sortedKeys(p.notes) {
		if err := p.cluster.SetGone(ctx, n.Network, node, p.notes[node]); err != nil {
			return err
		}
	}
	return nil
}

// ApplyDeadNodes releases the plan's records as the GC verb does, each
// through a Guard over its own node's keys, going on past errors.
func (n *Node) ApplyDeadNodes(ctx context.Context, p *DeadPlan, r *Report) error {
	var errs []error
	for _, node := range sortedKeys(p.Release) {
		g := n.guard.ForNode(node, p.cluster.ForNode(node))
		failed := len(errs)
		for _, rec := range p.Release[node] {
			if err := g.Collect(ctx, rec, n.CNIPath, p.rules); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == failed {
			errs = append(errs, n.forgetGoneNote(ctx, p.cluster, node)...)
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

// forgetGoneNote drops the sweep's note that node is gone once none of its
// records is left: state safe-ipam wrote goes with what it was for.
func (n *Node) forgetGoneNote(ctx context.Context, cluster store.Cluster, node string) []error {
	left, err := cluster.ForNode(node).List(ctx, n.Network)
	if err != nil || len(left) > 0 {
		return nil // the next sweep forgets it (forgetRest)
	}
	if err := cluster.SetGone(ctx, n.Network, node, time.Time{}); err != nil {
		return []error{err}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
