package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/safe-ipam/safe-ipam/ipam/liveness"
)

// Report is the audit's output; its JSON form is stable (README).
type Report struct {
	Revision int64 `json:"revision"`
	// ResourceVersion is where the Kubernetes datastore was read.
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	Liveness        string    `json:"liveness"`
	Summary         Summary   `json:"summary"`
	Findings        []Finding `json:"findings"`
	Actions         []Action  `json:"actions,omitempty"`
	Refused         []Refusal `json:"refused,omitempty"`
	Applied         *bool     `json:"applied,omitempty"`
	// Warnings are about settings, not data: they do not change the exit
	// code.
	Warnings []string `json:"warnings,omitempty"`
	// Repair marks a report of `safe-ipam repair`.
	Repair bool `json:"repair,omitempty"`
}

// Summary counts what was read and found.
type Summary struct {
	Blocks      int          `json:"blocks"`
	Allocations int          `json:"allocations"`
	Handles     int          `json:"handles"`
	Records     int          `json:"records"`
	Findings    map[Kind]int `json:"findings"`
}

// NewReport summarises a snapshot and its findings.
func NewReport(snap *Snapshot, findings []Finding, live *liveness.View) *Report {
	r := &Report{Revision: snap.Revision, ResourceVersion: snap.ResourceVersion, Liveness: "none", Findings: findings,
		Summary: Summary{Blocks: len(snap.Blocks), Handles: len(snap.Handles), Records: len(snap.Records), Findings: map[Kind]int{}}}
	if live != nil {
		r.Liveness = live.Source
		if live.Node != "" {
			r.Liveness += " (node " + live.Node + ")"
		}
	}
	r.Summary.Allocations = len(snap.Allocations)
	for _, f := range findings {
		r.Summary.Findings[f.Kind]++
	}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	return r
}

// Clean says whether nothing but informational findings remain.
func (r *Report) Clean() bool {
	for _, f := range r.Findings {
		if f.Kind != Unverified && f.Kind != Quarantine {
			return false
		}
	}
	return true
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes a short table and a summary line.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.Findings) > 0 {
		fmt.Fprintln(tw, "KIND\tADDRESS\tHANDLE\tNODE\tRECORDS\tWHY")
		for _, f := range r.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, dash(f.Address), dash(f.Handle), dash(f.Node), dash(strings.Join(f.Records, ",")), f.Why)
		}
	}
	if len(r.Actions) > 0 {
		fmt.Fprintln(tw, "\nACTION\tHANDLE\tADDRESS\tRECORD\tOUTCOME\tWHY")
		for _, a := range r.Actions {
			outcome := a.Outcome
			if outcome == "" {
				outcome = "would apply (dry run)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.Kind, dash(a.Handle), dash(a.Address), dash(a.Record), outcome, a.Why)
		}
	}
	if len(r.Refused) > 0 {
		fmt.Fprintln(tw, "\nREFUSED\tADDRESS\tHANDLE\tWHY")
		for _, x := range r.Refused {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Finding.Kind, dash(x.Finding.Address), dash(x.Finding.Handle), x.Why)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, warning := range r.Warnings {
		fmt.Fprintln(w, "warning: "+warning)
	}
	_, err := fmt.Fprintf(w, "audit: %d blocks, %d allocations, %d handles, %d records; %s; liveness: %s\n",
		r.Summary.Blocks, r.Summary.Allocations, r.Summary.Handles, r.Summary.Records, r.countLine(), r.Liveness)
	if err != nil || !r.Repair {
		return err
	}
	_, err = fmt.Fprintln(w, r.repairLine())
	return err
}

func (r *Report) repairLine() string {
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

func (r *Report) countLine() string {
	if len(r.Findings) == 0 {
		return "clean"
	}
	kinds := make([]string, 0, len(r.Summary.Findings))
	for k, n := range r.Summary.Findings {
		kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
	}
	sort.Slice(kinds, func(i, j int) bool { return kindRank(kinds[i]) < kindRank(kinds[j]) })
	return strings.Join(kinds, ", ")
}

func kindRank(s string) int {
	_, k, _ := strings.Cut(s, " ")
	return kindOrder[Kind(k)]
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
