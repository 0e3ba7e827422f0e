// Package gc is `safe-ipam gc`: CNI GC for nodes where the runtime never
// sends it. Behind Calico's main plugin (CNI 1.0.0 at most) or under
// containerd 1.6, no GC reaches safe-ipam, so a record whose DEL never
// came (incident 001: hundreds of endpoints left after a kubelet
// upgrade), and the addresses under it, would stay forever. gc lists this
// node's records of one network, reads a liveness source, and releases
// what the source positively does not list, exactly as the GC verb does.
// It fails closed: a source it cannot read, or one that lists nothing
// while the node has records, releases nothing (incident 003).
package gc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// ErrUntrusted is a source that answered but cannot be believed.
var ErrUntrusted = errors.New("liveness source not trusted")

// Report is what one gc run found and did.
type Report struct {
	Network  string  `json:"network"`
	Node     string  `json:"node"`
	Liveness string  `json:"liveness"`
	Records  int     `json:"records"`
	Release  []Entry `json:"release"`
	Kept     []Entry `json:"kept"`
	// KeptUnread counts the records kept without being read: those of
	// the nodes Calico knows, which a sweep of dead nodes only counts.
	KeptUnread int `json:"keptUnread,omitempty"`
	// Sweep says that the records are other nodes' (a sweep of dead
	// nodes, run by Node), not Node's own; Claims, that they are their
	// AddressClaims (Calico's Kubernetes datastore), not records.
	Sweep  bool `json:"sweep,omitempty"`
	Claims bool `json:"claims,omitempty"`
	// OtherHosts are hosts other than this one that wrote records under
	// this node's Calico name (a stale nodename?); their records are kept.
	OtherHosts []string `json:"otherHosts,omitempty"`
	// Applied is nil on a dry run, else whether every release succeeded.
	Applied *bool  `json:"applied,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Entry is one record and what gc does with it.
type Entry struct {
	Attachment string   `json:"attachment"`
	Pod        string   `json:"pod,omitempty"`
	State      string   `json:"state"`
	IPs        []string `json:"ips,omitempty"`
	Why        string   `json:"why"`
}

// Collector runs one gc with a node's Releaser.
type Collector struct {
	Node   *Releaser
	Source liveness.Source
	// Former, when set, is a Calico node name this machine had before:
	// the collection judges the records it wrote under that name.
	Former string
	// FormerHosts are host names this machine had before: the records
	// they wrote are judged as this machine's.
	FormerHosts []string
	// target is the node whose records the plan judged.
	target *Releaser
}

// Plan lists the records first and reads the source second: a sandbox
// that becomes ready in between is then in the source, not taken for
// garbage. Every source error, and an empty answer while the node has
// records, is an error and plans nothing.
func (c *Collector) Plan(ctx context.Context) (*Plan, *Report, error) {
	c.target = c.Node
	if c.Former != "" {
		former, err := c.Node.Former(c.Former)
		if err != nil {
			return nil, nil, err
		}
		c.target = former
	}
	recs, err := c.target.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	view, err := c.Source.Read(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("liveness source: %w", err)
	}
	// gc judges this node's records on this machine: its runtime's word,
	// whatever node the source says it speaks for.
	listing := view.Listing()
	listing.Host, listing.FormerHosts = record.ThisHost(), c.FormerHosts
	if why := rulebook.TrustListing(listing, c.Node.Name, c.Node.Shared(), nil); why != "" {
		return nil, nil, fmt.Errorf("%w: %s", ErrUntrusted, why)
	}
	if c.Former != "" {
		// This machine's runtime, standing for the name it had.
		listing.Node, listing.Former = c.Former, true
	}
	if why := rulebook.TrustListing(listing, c.target.Name, c.target.Shared(), recs); why != "" {
		return nil, nil, fmt.Errorf("%w: %s", ErrUntrusted, why)
	}
	plan := c.target.Plan(recs, listing)
	r := &Report{Network: c.target.Network, Node: c.target.Name, Liveness: view.Source, Records: plan.Records, OtherHosts: plan.OtherHosts}
	for _, rec := range plan.Release {
		r.Release = append(r.Release, entry(rec, plan.witness.Judge(rec).Why))
	}
	for _, k := range plan.Keep {
		r.Kept = append(r.Kept, entry(k.Record, k.Why))
	}
	return plan, r, nil
}

// Apply releases what the plan releases and records the outcome.
func (c *Collector) Apply(ctx context.Context, plan *Plan, r *Report) error {
	return r.applied(c.target.Apply(ctx, plan))
}

// applied records the outcome of applying the report's plan, err.
func (r *Report) applied(err error) error {
	ok := err == nil
	r.Applied = &ok
	if err != nil {
		r.Error = err.Error()
	}
	return err
}

func entry(rec *record.Record, why string) Entry {
	e := Entry{Attachment: rec.Attachment.String(), State: string(rec.State), IPs: rec.IPs, Why: why}
	if rec.PodNamespace != "" || rec.PodName != "" {
		e.Pod = rec.PodNamespace + "/" + rec.PodName
	}
	return e
}

// WriteText prints the report as a table and a summary line.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tATTACHMENT\tPOD\tSTATE\tIPS\tWHY")
	action := "would release"
	switch {
	case r.Applied != nil && *r.Applied:
		action = "released"
	case r.Applied != nil:
		action = "release attempted"
	}
	for _, e := range r.Release {
		r.row(tw, action, e)
	}
	for _, e := range r.Kept {
		r.row(tw, "keep", e)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.WriteSummary(w)
}

// WriteSummary prints the report's summary line alone: what --every
// prints for a run that released nothing, so that a node's log does not
// list every running pod every few minutes.
func (r *Report) WriteSummary(w io.Writer) error {
	where := "on node " + r.Node
	if r.Sweep {
		where = "on other nodes (swept by node " + r.Node + ")"
	}
	what := "records"
	if r.Claims {
		what = "AddressClaims"
	}
	_, err := fmt.Fprintf(w, "gc: %d %s of network %s %s; %d to release, %d kept; %s; liveness: %s\n",
		r.Records, what, r.Network, where, len(r.Release), len(r.Kept)+r.KeptUnread, r.outcome(), r.Liveness)
	if err == nil && len(r.OtherHosts) > 0 {
		_, err = fmt.Fprintf(w, "gc: WARNING: host(s) %s wrote records under node %s's Calico name, as this host does: a stale Calico nodename? Their records are kept, never judged by this host's runtime; fix the node's Calico nodename, or, if a host named so is this machine before a host rename, run gc with --former-host\n",
			strings.Join(r.OtherHosts, ", "), r.Node)
	}
	return err
}

func (r *Report) row(w io.Writer, action string, e Entry) {
	pod, ips := e.Pod, strings.Join(e.IPs, ",")
	if pod == "" {
		pod = "-"
	}
	if ips == "" {
		ips = "-"
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", action, e.Attachment, pod, e.State, ips, e.Why)
}

func (r *Report) outcome() string {
	switch {
	case r.Applied == nil && len(r.Release) > 0:
		return "dry run (pass --apply to release)"
	case r.Applied == nil:
		return "nothing to do"
	case *r.Applied:
		return "applied"
	}
	return "applied with errors: " + r.Error
}

// joinErrors is every release's error in one, as the GC verb reports them.
func joinErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return fmt.Errorf("GC: %d error(s): %s", len(errs), strings.Join(msgs, "; "))
}
