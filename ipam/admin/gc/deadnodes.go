package gc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
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

// ErrUntrustedNodes is a Nodes listing the rulebook does not take for
// evidence of any node's death (rulebook.TrustNodes): it lacks the
// sweeping node, or too large a share of the nodes at once.
var ErrUntrustedNodes = errors.New("Calico's Nodes listing not trusted")

// DeadPlan is what gc --dead-nodes would release.
type DeadPlan struct {
	// Release are the records of nodes that are gone, by node.
	Release map[string][]*record.Record
	// notes are what the sweep found, by node: gone first now (true), or
	// back or without records (false), its note to forget. NoteSweep
	// writes them: a dry run writes nothing.
	notes map[string]bool
	grace time.Duration
	// witnesses are the evidence each released node's records were
	// judged on, for Collect to judge a changed record again.
	witnesses map[string]rulebook.Witness
	cluster   store.Cluster // the store the records were listed from
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
	node      *Releaser
	cluster   store.Cluster
	known     map[string]bool
	sightings map[string]store.Sighting
	plan      *DeadPlan
	report    *Report
}

// PlanDeadNodes counts every node's records of the network and lists
// Calico's Nodes once; the records of a node Calico does not know are
// released when an earlier sweep found it gone too, and the grace it set
// has passed by the store's clock (rulebook.Death). A listing the
// rulebook does not trust (TrustNodes) plans nothing and notes nothing.
// The plan notes each node it finds gone first, with grace, and forgets
// the notes of nodes that came back or have no records left, for
// NoteSweep to write. Every read error is an error, and the plan is then
// empty.
func (n *Releaser) PlanDeadNodes(ctx context.Context, ds datastore.Datastore, grace time.Duration) (*DeadPlan, *Report, error) {
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
	sightings, err := cluster.Sightings(ctx, n.Network)
	if err != nil {
		return nil, nil, err
	}
	sw := &sweep{node: n, cluster: cluster, known: map[string]bool{}, sightings: sightings,
		plan:   &DeadPlan{Release: map[string][]*record.Record{}, notes: map[string]bool{}, grace: grace, witnesses: map[string]rulebook.Witness{}, cluster: cluster},
		report: &Report{Network: n.Network, Node: n.Name, Sweep: true, Liveness: "Calico's Nodes (" + ds.Kind() + ")"}}
	for _, name := range names {
		sw.known[name] = true
	}
	// chaos:sweep-trusts-any-listing (a mutant breaks what follows)
	if why := rulebook.TrustNodes(rulebook.NodesListing{Self: n.Name, Known: sw.known, Recorded: sortedKeys(counts), MaxGoneShare: n.MaxGoneShare}); why != "" {
		return nil, nil, fmt.Errorf("%w: %s", ErrUntrustedNodes, why)
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
	if node == sw.node.Name {
		// This node's own records are the liveness source's; it runs,
		// whatever an older sweep noted of it.
		if _, noted := sw.sightings[node]; noted {
			sw.plan.notes[node] = false
		}
		return nil
	}
	sg, inNotes := sw.sightings[node]
	noted := inNotes && !sg.Legacy
	// chaos:grace-by-wall-clock (a mutant breaks what follows)
	death := &rulebook.Death{Known: sw.known[node], Noted: noted, Since: sg.Since, Grace: sg.Grace, Passed: sg.Passed}
	// chaos:gc-dead-nodes-keeps (a mutant breaks what follows)
	if death.Known {
		sw.report.KeptUnread += count
		if inNotes {
			sw.plan.notes[node] = false
		}
		return nil
	}
	if !noted {
		sw.plan.notes[node] = true
	}
	recs, err := sw.cluster.ForNode(node).List(ctx, sw.node.Network)
	if err != nil {
		return err
	}
	w := sw.node.guard.ForNode(node, sw.cluster.ForNode(node)).DeadNodeWitness(death)
	for _, rec := range recs {
		v := w.Judge(rec)
		if !v.Release {
			sw.report.Kept = append(sw.report.Kept, entry(rec, v.Why))
			continue
		}
		sw.plan.witnesses[node] = w
		sw.plan.Release[node] = append(sw.plan.Release[node], rec)
		sw.report.Release = append(sw.report.Release, entry(rec, v.Why))
	}
	return nil
}

// forgetRest forgets the notes of nodes without records: released, or
// forgotten by uninstall.
func (sw *sweep) forgetRest(counts map[string]int) {
	for node := range sw.sightings {
		if counts[node] == 0 {
			sw.plan.notes[node] = false
		}
	}
}

// NoteSweep writes what the plan's sweep found: the nodes it found gone
// first, and the notes to forget. A dry run does not call it, so that it
// writes nothing to the store (the next sweep that applies notes them).
func (n *Releaser) NoteSweep(ctx context.Context, p *DeadPlan) error {
	for _, node := range sortedKeys(p.notes) {
		var err error
		if p.notes[node] {
			err = p.cluster.NoteGone(ctx, n.Network, node, p.grace)
		} else {
			err = p.cluster.ForgetGone(ctx, n.Network, node)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ApplyDeadNodes releases the plan's records as the GC verb does, each
// through a Guard over its own node's keys, going on past errors.
func (n *Releaser) ApplyDeadNodes(ctx context.Context, p *DeadPlan, r *Report) error {
	var errs []error
	for _, node := range sortedKeys(p.Release) {
		g := n.guard.ForNode(node, p.cluster.ForNode(node))
		failed := len(errs)
		for _, rec := range p.Release[node] {
			if err := g.Collect(ctx, rec, n.CNIPath, p.witnesses[node]); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == failed {
			if err := store.ForgetGoneOnceEmpty(ctx, p.cluster, n.Network, node); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return r.applied(joinErrors(errs))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
