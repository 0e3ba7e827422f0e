package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
)

// Report is the audit's output; its JSON form is stable (docs/operations.md).
type Report struct {
	Revision int64 `json:"revision"`
	// ResourceVersion is where the Kubernetes datastore was read.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Liveness        string `json:"liveness"`
	// Untrusted says why the named liveness source was not trusted: then
	// nothing was judged by it, and the report is never clean.
	Untrusted string    `json:"untrusted,omitempty"`
	Summary   Summary   `json:"summary"`
	Findings  []Finding `json:"findings"`
	// Warnings are about settings, not data: they do not change the exit
	// code.
	Warnings []string `json:"warnings,omitempty"`
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
func NewReport(snap *snapshot.Snapshot, findings []Finding, live *liveness.View) *Report {
	r := &Report{Revision: snap.Revision, ResourceVersion: snap.ResourceVersion, Liveness: "none", Findings: findings,
		Summary: Summary{Blocks: len(snap.Blocks), Handles: snap.HandleCount(), Records: len(snap.Records), Findings: map[Kind]int{}}}
	if live != nil {
		r.Liveness = live.Source
		if live.Node != "" {
			r.Liveness += " (node " + live.Node + ")"
		}
	}
	r.Summary.Allocations = snap.Allocations.Len()
	for _, f := range findings {
		r.Summary.Findings[f.Kind]++
	}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	return r
}

// Clean says whether nothing but informational findings remain, judged
// by a source that was trusted (or with none named).
func (r *Report) Clean() bool {
	if r.Untrusted != "" {
		return false
	}
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
func (r *Report) WriteText(w io.Writer) error { return r.WriteTextWith(w, nil, "") }

// WriteTextWith writes the findings table, then the tables more writes
// into the same columns (repair's actions and refusals), the warnings,
// the summary line, and last as a line of its own when not "".
func (r *Report) WriteTextWith(w io.Writer, more func(tw io.Writer), last string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.Findings) > 0 {
		fmt.Fprintln(tw, "KIND\tADDRESS\tHANDLE\tNODE\tRECORDS\tWHY")
		for _, f := range r.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, Dash(f.Address), Dash(f.Handle), Dash(f.Node), Dash(strings.Join(f.Records, ",")), f.Why)
		}
	}
	if more != nil {
		more(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, warning := range r.Warnings {
		fmt.Fprintln(w, "warning: "+warning)
	}
	_, err := fmt.Fprintf(w, "audit: %d blocks, %d allocations, %d handles, %d records; %s; liveness: %s\n",
		r.Summary.Blocks, r.Summary.Allocations, r.Summary.Handles, r.Summary.Records, r.countLine(), r.Liveness)
	if err != nil || last == "" {
		return err
	}
	_, err = fmt.Fprintln(w, last)
	return err
}

func (r *Report) countLine() string {
	if r.Untrusted != "" && len(r.Findings) == 0 {
		return "nothing judged"
	}
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

// Dash stands for an empty table cell.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
