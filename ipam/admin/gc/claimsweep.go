package gc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// On Calico's Kubernetes datastore a node's records went with its file
// store when it died, but its claims stay in the API server
// (claims.Sweep). The sweep of dead nodes there judges the claims as the
// etcd store's sweep judges records, by the same rulebook (Death): those
// of a node Calico no longer knows go once two sweeps found it gone, at
// least a grace apart by the API server's clock. Their allocations are
// kube-controllers' to free, as for Calico alone; an address it handed out
// again and a node quarantined is released by that node's gc once the
// claim is gone (rulebook.RemoteQuarantine).
//
// A sweep reads, per cluster: the network's claims in one paged listing,
// Calico's Nodes in one, and the sweeps' Lease.

// ClaimPlan is what a sweep of the claims would release.
type ClaimPlan struct {
	Release []*claims.Claim
	// notes are the sweep's findings, as DeadPlan's: a node gone first now
	// (true), or back or without claims (false).
	notes map[string]bool
	// counts are the claims of each node that Release holds; kept, those
	// the rulebook keeps.
	counts, kept map[string]int
	sweep        *claims.Sweep
	grace        time.Duration
}

// Len is how many claims the plan releases.
func (p *ClaimPlan) Len() int { return len(p.Release) }

// PlanClaimSweep lists the network's claims and Calico's Nodes, and plans
// to release the claims of the nodes the rulebook finds gone, from the
// notes of sw, the sweeps' Lease as this round read it. A listing the
// rulebook does not trust (TrustNodes) plans nothing.
func (n *Releaser) PlanClaimSweep(ctx context.Context, ds datastore.Datastore, cl *claims.Client, sw *claims.Sweep, grace time.Duration) (*ClaimPlan, *Report, error) {
	all, damaged, err := cl.All(ctx, n.Network)
	if err != nil {
		return nil, nil, err
	}
	names, err := ds.Nodes(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("which nodes are gone? %w; nothing is released", err)
	}
	known := map[string]bool{}
	for _, name := range names {
		known[name] = true
	}
	byNode := map[string][]*claims.Claim{}
	for _, c := range all {
		byNode[c.Node] = append(byNode[c.Node], c)
	}
	if why := rulebook.TrustNodes(rulebook.NodesListing{Self: n.Name, Known: known, Recorded: sortedKeys(byNode), MaxGoneShare: n.MaxGoneShare}); why != "" {
		return nil, nil, fmt.Errorf("%w: %s", ErrUntrustedNodes, why)
	}
	plan := &ClaimPlan{notes: map[string]bool{}, counts: map[string]int{}, kept: map[string]int{}, sweep: sw, grace: grace}
	report := &Report{Network: n.Network, Node: n.Name, Sweep: true, Claims: true, Liveness: "Calico's Nodes (" + ds.Kind() + "), AddressClaims", Records: len(all)}
	for _, name := range damaged {
		report.Kept = append(report.Kept, Entry{Attachment: "AddressClaim " + name, State: "damaged", Why: "does not read: names no node whose death is evidence against it"})
	}
	for _, node := range sortedKeys(byNode) {
		if node != n.Name {
			plan.judge(n, node, byNode[node], known[node], report)
		}
	}
	for node := range sw.Gone {
		// A node with no claims left has nothing to note; the sweeping
		// node itself runs, whatever an older sweep noted of it.
		if len(byNode[node]) == 0 || node == n.Name {
			plan.notes[node] = false
		}
	}
	return plan, report, nil
}

// judge decides about the claims of node, which Calico knows or not.
func (p *ClaimPlan) judge(n *Releaser, node string, held []*claims.Claim, known bool, report *Report) {
	sg, inNotes := p.sweep.Gone[node]
	noted := inNotes && !sg.Legacy
	death := &rulebook.Death{Known: known, Noted: noted, Since: sg.Since, Grace: sg.Grace, Passed: sg.Passed}
	if known {
		report.KeptUnread += len(held)
		if inNotes {
			p.notes[node] = false
		}
		return
	}
	if !noted {
		p.notes[node] = true
	}
	w := n.guard.DeadNodeWitness(death)
	for _, c := range held {
		rec := c.Record()
		if v := w.Judge(rec); !v.Release {
			report.Kept = append(report.Kept, entry(rec, v.Why))
			p.kept[node]++
			continue
		}
		p.Release = append(p.Release, c)
		p.counts[node]++
		report.Release = append(report.Release, entry(rec, "a claim of a node that is gone: Calico has no Node "+node))
	}
}

// NoteClaimSweep writes what the plan's sweep found on the sweeps' Lease.
// A dry run does not call it.
func (n *Releaser) NoteClaimSweep(ctx context.Context, cl *claims.Client, p *ClaimPlan) error {
	return cl.Note(ctx, p.sweep, p.notes, p.grace)
}

// ApplyClaimSweep releases the plan's claims, each if it is still the
// object the sweep read (its UID and resourceVersion), going on past
// errors, and forgets the notes of the nodes it left no claim of.
func (n *Releaser) ApplyClaimSweep(ctx context.Context, cl *claims.Client, p *ClaimPlan, r *Report) error {
	var errs []error
	failed := map[string]bool{}
	for _, c := range p.Release {
		if err := cl.Release(ctx, c); err != nil {
			errs = append(errs, err)
			failed[c.Node] = true
		}
	}
	forget := map[string]bool{}
	for node := range p.counts {
		if !failed[node] && p.kept[node] == 0 {
			forget[node] = false
		}
	}
	// NoteClaimSweep checked the lead before these releases: a Note with
	// nothing to forget would only read the Lease again.
	if len(forget) > 0 {
		if err := cl.Note(ctx, p.sweep, forget, p.grace); err != nil {
			errs = append(errs, err)
		}
	}
	return r.applied(joinErrors(errs))
}

// sweepClaims is --dead-nodes where the claims are swept: it plans from
// the Lease this round's election read (a run by hand reads it), notes
// what it found with --apply, and applies.
func (r *runner) sweepClaims(ctx context.Context, node *Releaser, ds datastore.Datastore) (*Report, func() error, int, error) {
	cl := r.sweeper.claimsClient(r.conf)
	sw := r.sweeper.last
	r.sweeper.last = nil // each round reads the Lease again
	var err error
	if sw == nil {
		sw, err = cl.Lead(ctx, node.Network, nil, 0, false)
	}
	var plan *ClaimPlan
	var report *Report
	if err == nil {
		plan, report, err = node.PlanClaimSweep(ctx, ds, cl, sw, r.deadGrace)
	}
	if errors.Is(err, claims.ErrClaimsOff) {
		r.claimsNotSwept(err)
		return nil, nil, 0, nil
	}
	if errors.Is(err, ErrUntrustedNodes) {
		r.tally.refused = 1
	}
	if err == nil && r.apply.On {
		err = node.NoteClaimSweep(ctx, cl, plan)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	return report, func() error { return node.ApplyClaimSweep(ctx, cl, plan, report) }, plan.Len(), nil
}

// claimsNotSwept says that there are no claims to sweep: the API server
// serves no AddressClaims, so no node makes any. As before the claims,
// nothing to do, and no failure. (A Lease missing or refused where claims
// are served is a failed sweep: dead nodes' claims would stay.)
func (r *runner) claimsNotSwept(err error) int {
	fmt.Fprintf(r.stdout, "gc --dead-nodes: no claims to sweep: %v; nothing to do\n", err)
	return admin.ExitOK
}
