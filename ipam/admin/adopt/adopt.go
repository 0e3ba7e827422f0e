// Package adopt gives safe-ipam a record of the attachments that already
// run on a node: pods started before safe-ipam was installed, whose
// addresses it would otherwise not know, so that nothing protects them
// from an ADD that is handed their address again (incidents 000 and 002).
//
// For each attachment of the network that the liveness source lists and
// that has no record, adopt plans a committed record with the addresses
// the runtime saw, the pod, the node and the delegate handle that really
// holds them in Calico's data. An attachment whose address Calico shows
// free, or under a handle that is not its own, was released early: it is
// reported and adopted all the same, so that fencing protects its address
// from then on.
package adopt

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Kinds of action.
const (
	// KindAdopt: a record is written for an attachment whose addresses
	// its own handle holds in Calico.
	KindAdopt = "adopt"
	// KindEarlyRelease: Calico shows an address of the running attachment
	// free or under another handle; it is adopted so that fencing keeps
	// the address from the next ADD.
	KindEarlyRelease = "early-release"
	// KindRecorded: the attachment has a record already; nothing to do.
	KindRecorded = "recorded"
)

// Outcomes.
const (
	OutcomeDryRun   = "would write (dry run)"
	OutcomeWritten  = "written"
	OutcomeRecorded = "already recorded"
	OutcomeRaced    = "a record appeared meanwhile: left alone"
	OutcomeHeld     = "not adopted: another record holds the address"
)

// Entry is one running attachment the source lists, with what the
// runtime kept of its ADD.
type Entry struct {
	liveness.Running
	// Result is the cached ADD result (CNI cache), nil when the source
	// keeps none (CRI, a --live file).
	Result []byte
	// From names where the entry came from, for messages.
	From string
}

// Skip is an entry left out, and why.
type Skip struct {
	From   string `json:"from"`
	Reason string `json:"reason"`
}

// Action is what adopt does (or would do) for one attachment.
type Action struct {
	Kind       string   `json:"kind"`
	Attachment string   `json:"attachment"`
	Pod        string   `json:"pod,omitempty"`
	IPs        []string `json:"ips"`
	Handle     string   `json:"handle,omitempty"`
	Outcome    string   `json:"outcome"`
	Why        string   `json:"why"`

	rec *record.Record
}

// Plan is what adopt learned: an action per listed attachment of the
// network, and the entries it skipped.
type Plan struct {
	Network string   `json:"network"`
	Node    string   `json:"node"`
	Source  string   `json:"source"`
	Actions []Action `json:"actions"`
	Skipped []Skip   `json:"skipped,omitempty"`
	// Applied is set after --apply: every write succeeded.
	Applied *bool `json:"applied,omitempty"`
}

// Planner decides each entry's action.
type Planner struct {
	Cfg     *config.Config
	Node    string
	Store   store.Store
	Holders Holders
	Now     func() time.Time
}

// Plan plans every entry. Entries of another network, without addresses,
// or with names CNI forbids are skipped; a store that cannot be read is
// an error, since "no record" must not be guessed.
func (p *Planner) Plan(ctx context.Context, source string, entries []Entry, skipped []Skip) (*Plan, error) {
	plan := &Plan{Network: p.Cfg.Network, Node: p.Node, Source: source, Skipped: skipped}
	for _, e := range entries {
		if e.IfName == "lo" {
			continue // the runtime's own loopback (containerd's cni-loopback): no pod address, no warning
		}
		act, skip, err := p.plan(ctx, e)
		switch {
		case err != nil:
			return nil, err
		case skip != "":
			plan.Skipped = append(plan.Skipped, Skip{From: e.From, Reason: skip})
		default:
			plan.Actions = append(plan.Actions, *act)
		}
	}
	return plan, nil
}

// plan decides one entry: a skip reason, or an action.
func (p *Planner) plan(ctx context.Context, e Entry) (*Action, string, error) {
	if e.Network != "" && e.Network != p.Cfg.Network {
		return nil, fmt.Sprintf("names network %q, not %q", e.Network, p.Cfg.Network), nil
	}
	att := record.Attachment{Network: p.Cfg.Network, ContainerID: e.ContainerID, IfName: e.IfName}
	if err := att.Validate(); err != nil {
		return nil, err.Error(), nil
	}
	addrs, err := entryAddrs(e)
	if err != nil {
		return nil, err.Error(), nil
	}
	if len(addrs) == 0 {
		return nil, "lists no address", nil
	}
	cur, err := p.Store.Get(ctx, att)
	if err != nil {
		return nil, "", fmt.Errorf("reading the record of %s: %w", att, err)
	}
	if cur != nil {
		return &Action{Kind: KindRecorded, Attachment: att.String(), Pod: podName(e.Running), IPs: cur.IPs, Handle: cur.Handle,
			Outcome: OutcomeRecorded, Why: fmt.Sprintf("safe-ipam has a %s record of it", cur.State)}, "", nil
	}
	rec, err := p.record(att, e, addrs)
	if err != nil {
		return nil, err.Error(), nil
	}
	act := &Action{Kind: KindAdopt, Attachment: att.String(), Pod: podName(e.Running), IPs: rec.IPs, Handle: rec.Handle,
		Outcome: OutcomeDryRun, rec: rec}
	act.Why = fmt.Sprintf("running, no record; Calico holds its addresses under %s", rec.Handle)
	if lost := p.Holders.NotHeldBy(addrs, rec.Handle); lost != "" {
		act.Kind = KindEarlyRelease
		act.Why = lost + ": released early; adopted so that fencing keeps the address from the next ADD"
	}
	return act, "", nil
}

// record is the committed record an entry gets.
func (p *Planner) record(att record.Attachment, e Entry, addrs []netip.Addr) (*record.Record, error) {
	prefixes := p.Holders.Prefixes(addrs, e.IPs)
	result, err := ipamResult(e.Result, prefixes)
	if err != nil {
		return nil, fmt.Errorf("cached result: %w", err)
	}
	ips := make([]string, len(prefixes))
	for i, pfx := range prefixes {
		ips[i] = pfx.String()
	}
	now := p.Now().UTC()
	return &record.Record{
		Attachment:   att,
		PodNamespace: e.PodNamespace,
		PodName:      e.PodName,
		PodUID:       e.PodUID,
		Node:         p.Node,
		Host:         record.ThisHost(), // adopt runs on the node whose runtime it reads
		Handle:       p.Holders.HandleOf(att, e.Running, addrs, ownHandle(p.Cfg, att)),
		State:        record.Committed,
		IPs:          ips,
		Result:       result,
		Created:      now,
		Updated:      now,
	}, nil
}

// ownHandle is the handle the plugin's own ADD would have used.
func ownHandle(cfg *config.Config, att record.Attachment) string {
	if cfg.DelegateHandles == config.HandlesPod {
		return att.ContainerID // Calico 2.x without pod identity
	}
	return att.Network + "." + att.ContainerID
}

// Apply writes the planned records. A record that appeared since the
// plan is never overwritten, and an address another committed record
// holds is never claimed twice: both are left as they are and said so. It
// goes on past a failed write and returns the first error.
func Apply(ctx context.Context, st store.Store, plan *Plan) error {
	var first error
	for i := range plan.Actions {
		act := &plan.Actions[i]
		if act.rec == nil {
			continue
		}
		err := createRecord(ctx, st, act.rec)
		var held *store.HeldError
		switch {
		case err == nil:
			act.Outcome = OutcomeWritten
		case errors.Is(err, store.ErrConflict):
			act.Outcome = OutcomeRaced
		case errors.As(err, &held):
			act.Outcome = OutcomeHeld
			act.Why = fmt.Sprintf("%s also runs with %s and has its record: two pods share the address (delete and recreate one of them)", held.Holder.Attachment, held.Addr)
		default:
			act.Outcome = "failed: " + err.Error()
			if first == nil {
				first = fmt.Errorf("writing the record of %s: %w", act.Attachment, err)
			}
		}
	}
	applied := first == nil
	plan.Applied = &applied
	return first
}

// createRecord writes rec only if the attachment still has no record (a
// compare-and-swap against "no record"), so an ADD that committed since
// the plan is never overwritten. It commits as ADD does: in the same
// step, the network's address index takes rec's addresses, and no other
// committed record may hold one of them.
func createRecord(ctx context.Context, st store.Store, rec *record.Record) error {
	_, err := st.Commit(ctx, nil, rec)
	return err
}

// Pending says whether the plan still has records to write, or ones it
// could not write because another record holds their address.
func (p *Plan) Pending() bool {
	for _, a := range p.Actions {
		if a.rec != nil && (a.Outcome == OutcomeDryRun || a.Outcome == OutcomeHeld) {
			return true
		}
	}
	return false
}

// EarlyReleases counts the attachments Calico released early.
func (p *Plan) EarlyReleases() int {
	n := 0
	for _, a := range p.Actions {
		if a.Kind == KindEarlyRelease {
			n++
		}
	}
	return n
}

func podName(a liveness.Running) string {
	if a.PodNamespace == "" && a.PodName == "" {
		return ""
	}
	return a.PodNamespace + "/" + a.PodName
}

// entryAddrs parses the entry's addresses, given as prefixes or bare.
func entryAddrs(e Entry) ([]netip.Addr, error) {
	var out []netip.Addr
	var bad []string
	for _, s := range e.IPs {
		addr, ok := liveness.ParseAddr(s)
		if !ok {
			bad = append(bad, s)
			continue
		}
		out = append(out, addr)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("address %s does not parse", strings.Join(bad, ", "))
	}
	return out, nil
}
