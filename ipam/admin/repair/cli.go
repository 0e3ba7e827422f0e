package repair

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
)

const usage = `Usage: safe-ipam repair [flags]

Plans (and with --apply makes) only proven fixes: releases leaked and
pod-name-handle addresses whose owner a readable liveness source does not
list, re-claims free addresses that a running record still holds,
rewrites handle counts from the blocks, and forgets records whose
attachment the source positively does not list. Every write is guarded by the
versions it read (etcd: one Txn; Kubernetes: each object's resourceVersion,
in calico-ipam's order). It only shows what it would do unless --apply is
given. Exit 0: nothing left to do; 1: refusals or unapplied fixes; 2: error.

Example: safe-ipam repair --conf /etc/cni/net.d/10-calico.conflist \
           --cri-endpoint unix:///run/containerd/containerd.sock --apply

`

// Report is the audit's report with what repair planned and did; its
// JSON form is the audit's plus these fields (docs/operations.md).
type Report struct {
	*audit.Report
	Actions []Action  `json:"actions,omitempty"`
	Refused []Refusal `json:"refused,omitempty"`
	Applied *bool     `json:"applied,omitempty"`
	// Repair marks a report of `safe-ipam repair`.
	Repair bool `json:"repair"`
}

// Run is `safe-ipam repair`.
func Run(args []string, stdout, stderr io.Writer) int {
	apply := admin.NewApply("make the changes", "change")
	s := audit.NewCLI("repair", usage, stderr, apply)
	s.Writes = true // forgetting a stale record writes the record store
	fs := s.Cmd.Flags()
	fs.DurationVar(&s.Settle, "settle", 10*time.Second, "with --apply: wait this long, read the liveness source again, and act only on what still holds and did not change since the audit")
	if code, stop := s.Cmd.ParseOrExit(args); stop {
		return code
	}
	c := &cli{shared: s, apply: apply.On}
	return s.Run(func(ctx context.Context, e *audit.Examined) (int, error) {
		report := &Report{Report: e.Report, Repair: true}
		code := c.repairAll(ctx, &Repairer{Data: e.Data, Records: e.Records, Snap: e.Snap}, report, e.Live)
		return code, s.Out.Print(stdout, report, report.WriteText)
	})
}

type cli struct {
	// shared is the flags and the reading repair shares with the audit.
	shared *audit.CLI
	apply  bool
}

func (c *cli) repairAll(ctx context.Context, r *Repairer, report *Report, live *liveness.View) int {
	snap := r.Snap
	report.Actions, report.Refused = Plan(snap, report.Findings, live)
	code := audit.ExitClean
	if len(report.Refused) > 0 || (!c.apply && len(report.Actions) > 0) || report.Untrusted != "" {
		// An untrusted source judged nothing: nothing is known to be left.
		code = audit.ExitFindings
	}
	if c.apply {
		applied := true
		live = c.settleLiveness(ctx, snap, report, live)
		r.Live = live
		if err := r.Apply(ctx, report.Actions); err != nil {
			applied, code = false, audit.ExitFindings
		}
		report.Applied = &applied
	}
	return code
}

// settleLiveness waits, reads the liveness source again and keeps only
// the actions the fresh view still supports: a pod whose ADD was finishing
// during the audit shows up in the source only once ADD has returned.
// Actions dropped here get an outcome saying so.
func (c *cli) settleLiveness(ctx context.Context, snap *snapshot.Snapshot, report *Report, live *liveness.View) *liveness.View {
	settle := c.shared.Settle
	if settle <= 0 || live == nil {
		return live
	}
	select {
	case <-time.After(settle):
	case <-ctx.Done():
	}
	fresh, note, err := c.shared.ReadLiveness(ctx, snap)
	if err == nil && fresh == nil {
		err = errors.New(note)
	}
	still := map[string]bool{}
	if err == nil {
		again, _ := Plan(snap, audit.Analyze(snap, c.shared.Options(fresh)), fresh)
		for _, a := range again {
			still[a.Kind+" "+a.Handle+" "+a.Address] = true
		}
	}
	kept := report.Actions[:0]
	for _, a := range report.Actions {
		if still[a.Kind+" "+a.Handle+" "+a.Address] {
			kept = append(kept, a)
		} else {
			a.Outcome = fmt.Sprintf("skipped: the liveness source read again after %s no longer supports it (%v)", settle, err)
			report.Refused = append(report.Refused, Refusal{Finding: audit.Finding{Kind: audit.Kind(a.Kind), Handle: a.Handle, Address: a.Address}, Why: a.Outcome})
		}
	}
	report.Actions = kept
	return fresh
}

// WriteText writes the audit's tables with the actions and refusals, and
// a line on what repair did.
func (r *Report) WriteText(w io.Writer) error {
	return r.Report.WriteTextWith(w, r.writeTables, r.line())
}

func (r *Report) writeTables(tw io.Writer) {
	if len(r.Actions) > 0 {
		fmt.Fprintln(tw, "\nACTION\tHANDLE\tADDRESS\tRECORD\tOUTCOME\tWHY")
		for _, a := range r.Actions {
			outcome := a.Outcome
			if outcome == "" {
				outcome = "would apply (dry run)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.Kind, audit.Dash(a.Handle), audit.Dash(a.Address), audit.Dash(a.Record), outcome, a.Why)
		}
	}
	if len(r.Refused) > 0 {
		fmt.Fprintln(tw, "\nREFUSED\tADDRESS\tHANDLE\tWHY")
		for _, x := range r.Refused {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Finding.Kind, audit.Dash(x.Finding.Address), audit.Dash(x.Finding.Handle), x.Why)
		}
	}
}

func (r *Report) line() string {
	if r.Applied == nil {
		return fmt.Sprintf("repair: dry run, %d change(s) would apply, %d refused; run with --apply to make them", len(r.Actions), len(r.Refused))
	}
	done := 0
	for _, a := range r.Actions {
		if a.Outcome == "done" {
			done++
		}
	}
	return fmt.Sprintf("repair: %d of %d change(s) applied, %d refused", done, len(r.Actions), len(r.Refused))
}
