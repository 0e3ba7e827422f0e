// Package repair plans, and with --apply makes, only the fixes the audit
// proves: it releases leaked and pod-name-handle addresses whose owner a
// readable liveness source does not list, re-claims free addresses that a
// running record still holds, rewrites handle counts from the blocks, and
// forgets records whose attachment is positively gone, releasing the
// allocations quarantined with them first.
// Every write is guarded by the versions it read (etcd: one Txn;
// Kubernetes: each object's resourceVersion, in calico-ipam's order).
package repair

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Action kinds.
const (
	ReleaseHandle  = "release-handle"
	Reclaim        = "reclaim"
	FixHandleCount = "fix-handle-count"
	ForgetRecord   = "forget-record"
)

// Action is one change repair would make.
type Action struct {
	Kind    string `json:"action"`
	Handle  string `json:"handle"`
	Address string `json:"address,omitempty"`
	Record  string `json:"record,omitempty"`
	Why     string `json:"why"`
	// Outcome is set once applied: "done", or why it was not.
	Outcome string `json:"outcome,omitempty"`

	rec *record.Record
}

// Refusal is a finding repair will not touch, and why.
type Refusal struct {
	Finding audit.Finding `json:"finding"`
	Why     string        `json:"why"`
}

// Plan turns findings into actions, refusing what is not proven.
func Plan(snap *snapshot.Snapshot, findings []audit.Finding, live *liveness.View) ([]Action, []Refusal) {
	var actions []Action
	var refused []Refusal
	recs := recordsByName(snap)
	for _, f := range findings {
		act, why := planOne(f, recs, live)
		if act != nil {
			if act.Kind == ForgetRecord {
				actions = append(actions, planQuarantineReleases(snap, act.rec)...)
				// chaos:repair-leaves-the-records-own-handle (a mutant breaks what follows)
				actions = append(actions, planOwnRelease(snap, act.rec)...)
			}
			actions = append(actions, *act)
		} else if why != "" {
			refused = append(refused, Refusal{Finding: f, Why: why})
		}
	}
	return actions, refused
}

func planOne(f audit.Finding, recs map[string]*record.Record, live *liveness.View) (*Action, string) {
	switch f.Kind {
	case audit.Unverified, audit.Quarantine:
		return nil, "" // informational: nothing to repair, nothing refused
	case audit.Leak, audit.PodNameHandle:
		if live == nil {
			return nil, "no liveness source: an unknown set of running pods never means none run"
		}
		if f.Unjudged != "" {
			return nil, "not proven gone: " + f.Unjudged
		}
		if !f.Releasable {
			return nil, "the liveness source lists its owner or one of its addresses: it runs"
		}
		return &Action{Kind: ReleaseHandle, Handle: f.Handle, Address: f.Address, Why: string(f.Kind) + ": " + f.Why}, ""
	case audit.EarlyRelease:
		return planReclaim(f, recs, live)
	case audit.Inconsistent:
		if f.Handle != "" && f.Address == "" && f.Block == "" && len(f.Records) == 0 { // a handle's count, which no record names
			return &Action{Kind: FixHandleCount, Handle: f.Handle, Why: f.Why}, ""
		}
		return nil, "repair does not rewrite blocks or affinities; fix by hand"
	case audit.Duplicate:
		return nil, "two owners: delete and recreate one of the pods (the address cannot be taken from either safely)"
	case audit.OrphanRecord:
		return planForget(f, recs, live)
	case audit.Unclaimed, audit.OrphanClaim:
		return nil, "this node's gc --apply settles the claims at its next round (the DaemonSet runs it), judged by the rulebook"
	}
	return nil, ""
}

func planReclaim(f audit.Finding, recs map[string]*record.Record, live *liveness.View) (*Action, string) {
	if len(f.Records) == 0 {
		return nil, "no record names the handle to re-claim under; recreate the pod"
	}
	if len(f.Records) != 1 || f.Block != "" {
		return nil, "the address is held by another handle now; only a free address can be re-claimed"
	}
	rec := recs[f.Records[0]]
	if rec == nil {
		return nil, "record not found"
	}
	addr, ok := liveness.ParseAddr(f.Address)
	if !ok {
		return nil, "the finding names no address"
	}
	if !live.Covers(rec.Node) || !live.ProvesRunning(rec, addr) {
		return nil, "no liveness source lists the record's attachment as running; re-claiming for a gone pod would leak the address"
	}
	return &Action{Kind: Reclaim, Handle: rec.Handle, Address: f.Address, Record: rec.Attachment.String(), rec: rec,
		Why: "re-claim the free address for the record that still holds it"}, ""
}

// planForget forgets a committed record the rulebook lets go without a
// DEL (the audit's verdict on it, rulebook.Record with Forget): a
// liveness source that covers it positively does not list its attachment,
// no DEL or GC of it will come (its sandbox went while safe-ipam was off
// the node, or a DEL never came), and kept, it would fence its addresses
// for ever. What Calico holds under the record's own handle goes first
// (planOwnRelease).
func planForget(f audit.Finding, recs map[string]*record.Record, live *liveness.View) (*Action, string) {
	if live == nil || len(f.Records) != 1 {
		return nil, "no liveness source: an unknown set of running pods never means none run"
	}
	rec := recs[f.Records[0]]
	switch {
	case rec == nil:
		return nil, "record not found"
	case !f.Releasable:
		return nil, "not proven gone: " + f.Unjudged
	}
	return &Action{Kind: ForgetRecord, Handle: rec.Handle, Record: rec.Attachment.String(), Address: audit.Addrs(rec.IPs), rec: rec,
		Why: "forget the record of an attachment that is gone: no DEL or GC will come for it"}, ""
}

// planQuarantineReleases releases, before a forgotten record goes, the
// allocations quarantined with it, as its DEL would have: nothing else
// ever will (the quarantined attachments' DELs answer from the
// quarantine, and once the record is forgotten no audit ties them to
// it). The record's attachment is gone, so its address is free to hand
// out again.
func planQuarantineReleases(snap *snapshot.Snapshot, rec *record.Record) []Action {
	var out []Action
	for _, q := range rec.Quarantined {
		// The handles calico-ipam keys a stripped ADD by (see the audit's
		// ownedHandles); only those that hold something are released.
		for _, handle := range []string{q.Network + "." + q.ContainerID, q.ContainerID} {
			if len(snap.HeldBy(handle)) == 0 {
				continue
			}
			out = append(out, Action{Kind: ReleaseHandle, Handle: handle, Address: audit.Addrs(q.IPs), Record: rec.Attachment.String(),
				Why: fmt.Sprintf("quarantine of %s held for %s, whose record is forgotten: released with it, as its DEL would", q.Attachment, rec.Attachment)})
		}
	}
	return out
}

// planOwnRelease releases, before a forgotten record goes, what Calico
// holds under the record's own container-keyed handle, as its DEL would
// have: the rulebook proved that container gone. Left for a later audit,
// nothing would tie the handle to a node once the record is gone (Calico
// 2.x writes no owner attributes), and no audit with a node-local source
// could judge it: a leak for ever. A pod-name handle (an adopted Calico
// 2.x pod's) is left to the next audit, which judges it by pod: another
// incarnation of the pod may hold an address under it.
func planOwnRelease(snap *snapshot.Snapshot, rec *record.Record) []Action {
	if !rulebook.OwnHandle(rec) || len(snap.HeldBy(rec.Handle)) == 0 {
		return nil
	}
	return []Action{{Kind: ReleaseHandle, Handle: rec.Handle, Address: audit.Addrs(rec.IPs), Record: rec.Attachment.String(),
		Why: fmt.Sprintf("held under the own handle of %s, whose container is gone: released before its record is forgotten, as its DEL would", rec.Attachment)}}
}

func recordsByName(snap *snapshot.Snapshot) map[string]*record.Record {
	m := make(map[string]*record.Record, len(snap.Records))
	for _, r := range snap.Records {
		m[r.Attachment.String()] = r
	}
	return m
}

// Repairer applies actions with writes guarded by the versions read.
type Repairer struct {
	Data datastore.Datastore
	// Records holds the records a re-claim is for; it re-checks them.
	Records snapshot.Records
	Snap    *snapshot.Snapshot
	Live    *liveness.View
	// BeforeCommit, when set, runs before every write (tests race it).
	BeforeCommit func(a Action, attempt int)
	Now          func() time.Time
}

const maxAttempts = 5

// errNoRecords is why a repair that needs records cannot re-check one.
var errNoRecords = errors.New("no record store to re-check the record in")

// Apply runs every action, retrying each from a fresh read when it loses
// a race, and records each outcome.
func (r *Repairer) Apply(ctx context.Context, actions []Action) error {
	var failed int
	for i := range actions {
		actions[i].Outcome = r.applyOne(ctx, actions[i])
		if actions[i].Outcome != "done" {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d repairs not applied", failed, len(actions))
	}
	return nil
}

func (r *Repairer) applyOne(ctx context.Context, a Action) string {
	if a.Kind == ForgetRecord {
		return r.forget(ctx, a)
	}
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		w, err := r.prepare(ctx, a)
		if errors.Is(err, snapshot.ErrStale) {
			return "skipped: " + err.Error()
		}
		if err != nil {
			return "failed: " + err.Error()
		}
		if r.BeforeCommit != nil {
			r.BeforeCommit(a, attempt)
		}
		err = r.commit(ctx, w)
		switch {
		case err == nil:
			return "done"
		case errors.Is(err, snapshot.ErrStale):
			return "skipped: " + err.Error()
		case !errors.Is(err, datastore.ErrConflict):
			return "failed: " + err.Error()
		}
	}
	return fmt.Sprintf("failed: lost the race %d times", maxAttempts)
}

// forget removes a stale record from the record store, comparing it with
// what the audit read: one that changed (an ADD re-used the attachment)
// is skipped.
func (r *Repairer) forget(ctx context.Context, a Action) string {
	if r.Records == nil {
		return "failed: " + errNoRecords.Error()
	}
	if r.BeforeCommit != nil {
		r.BeforeCommit(a, 1)
	}
	err := r.Records.Forget(ctx, a.rec)
	switch {
	case err == nil:
		return "done"
	case errors.Is(err, snapshot.ErrStale):
		return "skipped: " + err.Error()
	}
	return "failed: " + err.Error()
}

// write is one prepared change, and the record a re-claim is for.
type write struct {
	change datastore.Change
	rec    *record.Record
}

// commit writes w. A re-claim's record must still be the committed one
// the audit read: in the same etcd as Calico's data that is one more
// comparison in the Txn. Elsewhere it is re-checked just before the
// write; a DEL landing between that check and the write can at worst
// leave the address allocated for a gone pod, which a later audit reports
// as a leak (the fail-closed direction), never hand it out twice.
func (r *Repairer) commit(ctx context.Context, w write) error {
	if w.rec == nil {
		return r.Data.Write(ctx, w.change)
	}
	if r.Records == nil {
		return errNoRecords
	}
	if es, ok := r.Data.(*datastore.EtcdStore); ok {
		if er, ok := r.Records.(*snapshot.EtcdRecords); ok && er.Client == es.Client {
			return es.WriteComparing(ctx, w.change, er.Compare(w.rec))
		}
	}
	if err := r.Records.Recheck(ctx, w.rec); err != nil {
		return err
	}
	return r.Data.Write(ctx, w.change)
}

func (r *Repairer) prepare(ctx context.Context, a Action) (write, error) {
	switch a.Kind {
	case ReleaseHandle:
		return r.prepareRelease(ctx, a)
	case Reclaim:
		return r.prepareReclaim(ctx, a)
	case FixHandleCount:
		return r.prepareFixCount(ctx, a)
	}
	return write{}, fmt.Errorf("unknown action %q", a.Kind)
}

// freshDocs are the handle document and every block that holds the
// handle now, as just read: the blocks the snapshot saw it in, the blocks
// its document names, and any the action adds.
type freshDocs struct {
	handle *datastore.Handle // nil: absent
	blocks map[netip.Prefix]*datastore.Block
}

func (r *Repairer) readHandle(ctx context.Context, handle string, extra ...netip.Prefix) (*freshDocs, error) {
	d := &freshDocs{blocks: map[netip.Prefix]*datastore.Block{}}
	h, err := r.Data.Handle(ctx, handle)
	if err != nil {
		return nil, err
	}
	d.handle = h
	cidrs := append([]netip.Prefix(nil), extra...)
	for cidr := range r.Snap.HeldBy(handle) {
		cidrs = append(cidrs, cidr)
	}
	if h != nil {
		for k := range h.Handle.Block {
			if p, err := netip.ParsePrefix(k); err == nil {
				cidrs = append(cidrs, p)
			}
		}
	}
	for _, cidr := range cidrs {
		if _, done := d.blocks[cidr]; done {
			continue
		}
		b, err := r.Data.Block(ctx, cidr)
		if err != nil {
			return nil, err
		}
		if b != nil {
			d.blocks[cidr] = b
		}
	}
	return d, nil
}

// change writes the changed blocks and the handle with new counts (nil:
// delete), each guarded by the version it was read at; the blocks read
// and not changed must still be at theirs too.
func (d *freshDocs) change(handle string, counts *calico.Handle, changed map[netip.Prefix]bool, handleFirst bool) datastore.Change {
	c := datastore.Change{Handle: &datastore.Handle{ID: handle, Handle: counts}, HandleFirst: handleFirst}
	if d.handle != nil {
		h := *d.handle
		h.Handle = counts
		c.Handle = &h
	}
	for cidr, b := range d.blocks {
		if changed[cidr] {
			c.Blocks = append(c.Blocks, b)
		} else {
			c.Compared = append(c.Compared, b)
		}
	}
	return c
}

func (r *Repairer) prepareRelease(ctx context.Context, a Action) (write, error) {
	d, err := r.readUnchanged(ctx, a.Handle)
	if err != nil {
		return write{}, err
	}
	changed := map[netip.Prefix]bool{}
	for cidr, doc := range d.blocks {
		for _, ord := range doc.Block.OrdinalsOf(a.Handle) {
			if ip, err := doc.Block.IP(ord); err == nil && r.Live != nil && r.Live.ListsAddr(ip) {
				return write{}, fmt.Errorf("%w: %s is now held by a live attachment", snapshot.ErrStale, ip)
			}
		}
		if len(doc.Block.ReleaseHandle(a.Handle)) > 0 {
			changed[cidr] = true
		}
	}
	if len(changed) == 0 {
		return write{}, fmt.Errorf("%w: handle %s holds nothing", snapshot.ErrStale, a.Handle)
	}
	// A release frees the blocks first, then drops the handle, as
	// calico-ipam does.
	return write{change: d.change(a.Handle, nil, changed, false)}, nil
}

func (r *Repairer) prepareReclaim(ctx context.Context, a Action) (write, error) {
	addr, err := netip.ParseAddr(a.Address)
	if err != nil {
		return write{}, err
	}
	cidr, ok := r.blockOf(addr)
	if !ok {
		return write{}, fmt.Errorf("%w: no block holds %s", snapshot.ErrStale, addr)
	}
	d, err := r.readHandle(ctx, a.Handle, cidr)
	if err != nil {
		return write{}, err
	}
	// A handle changed since the audit may be calico-ipam at work, or on
	// Kubernetes the first half of this very re-claim, written before a
	// lost race on the block: counting it again would over-count.
	if err := r.handleUnchanged(a.Handle, d); err != nil {
		return write{}, err
	}
	doc := d.blocks[cidr]
	if doc == nil {
		return write{}, fmt.Errorf("%w: block %s is gone", snapshot.ErrStale, cidr)
	}
	ord, err := doc.Block.Ordinal(addr)
	if err != nil {
		return write{}, err
	}
	if _, taken := doc.Block.Attribute(ord); taken {
		return write{}, fmt.Errorf("%w: %s is no longer free", snapshot.ErrStale, addr)
	}
	if err := doc.Block.AllocateOrdinal(ord, a.Handle, r.secondary(a.rec)); err != nil {
		return write{}, fmt.Errorf("%w: %v", snapshot.ErrStale, err)
	}
	counts := calico.NewHandle()
	if d.handle != nil {
		counts = d.handle.Handle
	}
	counts.Add(cidr, 1)
	// A re-claim counts the handle first, then allocates in the block, as
	// calico-ipam does.
	return write{change: d.change(a.Handle, counts, map[netip.Prefix]bool{cidr: true}, true), rec: a.rec}, nil
}

// readUnchanged reads the handle and its blocks again, and fails unless
// they are as the audit read them (unchangedSinceAudit).
func (r *Repairer) readUnchanged(ctx context.Context, handle string) (*freshDocs, error) {
	d, err := r.readHandle(ctx, handle)
	if err == nil {
		err = r.unchangedSinceAudit(handle, d)
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// unchangedSinceAudit: calico-ipam writes a handle and its block in two
// steps (handle first on ADD, block first on release), so a document
// pair caught between them looks like a leak or a miscount. Acting only
// on a handle document still at the version the audit saw, whose
// addresses per block are still those the audit saw (after the settle
// wait), leaves any operation that was in flight alone.
func (r *Repairer) unchangedSinceAudit(handle string, d *freshDocs) error {
	if err := r.handleUnchanged(handle, d); err != nil {
		return err
	}
	seen := r.Snap.HeldBy(handle)
	for cidr, doc := range d.blocks {
		if n := len(doc.Block.OrdinalsOf(handle)); n != seen[cidr] {
			return fmt.Errorf("%w: handle %s holds %d addresses in %s, the audit saw %d; re-run", snapshot.ErrStale, handle, n, cidr, seen[cidr])
		}
	}
	return nil
}

// handleUnchanged: the handle document is still at the version the
// audit saw (both absent counts as unchanged).
func (r *Repairer) handleUnchanged(handle string, d *freshDocs) error {
	var now datastore.Version
	if d.handle != nil {
		now = d.handle.Version
	}
	if now != r.Snap.HandleVersion(handle) {
		return fmt.Errorf("%w: handle %s changed since the audit; calico-ipam may be working on it, re-run", snapshot.ErrStale, handle)
	}
	return nil
}

// secondary are the attributes Calico 3.x writes for a pod's address.
func (r *Repairer) secondary(rec *record.Record) map[string]string {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	s := map[string]string{"node": rec.Node, "timestamp": now().UTC().String()}
	if rec.PodNamespace != "" && rec.PodName != "" {
		s["namespace"], s["pod"] = rec.PodNamespace, rec.PodName
	}
	return s
}

func (r *Repairer) blockOf(addr netip.Addr) (netip.Prefix, bool) {
	for cidr := range r.Snap.Blocks {
		if cidr.Contains(addr) {
			return cidr, true
		}
	}
	return netip.Prefix{}, false
}

func (r *Repairer) prepareFixCount(ctx context.Context, a Action) (write, error) {
	d, err := r.readUnchanged(ctx, a.Handle)
	if err != nil {
		return write{}, err
	}
	counts := calico.NewHandle()
	for cidr, doc := range d.blocks {
		if n := len(doc.Block.OrdinalsOf(a.Handle)); n > 0 {
			counts.Add(cidr, n)
		}
	}
	if d.handle != nil && audit.SameCounts(d.handle.Handle.Block, counts.Block) {
		return write{}, fmt.Errorf("%w: counts already match", snapshot.ErrStale)
	}
	return write{change: d.change(a.Handle, counts, nil, false)}, nil
}
