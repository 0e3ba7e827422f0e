package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
)

// Action kinds.
const (
	ReleaseHandle  = "release-handle"
	Reclaim        = "reclaim"
	FixHandleCount = "fix-handle-count"
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
	Finding Finding `json:"finding"`
	Why     string  `json:"why"`
}

// Plan turns findings into actions, refusing what is not proven.
func Plan(snap *Snapshot, findings []Finding, live *liveness.View) ([]Action, []Refusal) {
	var actions []Action
	var refused []Refusal
	recs := recordsByName(snap)
	for _, f := range findings {
		act, why := planOne(f, recs, live)
		if act != nil {
			actions = append(actions, *act)
		} else if why != "" {
			refused = append(refused, Refusal{Finding: f, Why: why})
		}
	}
	return actions, refused
}

func planOne(f Finding, recs map[string]*record.Record, live *liveness.View) (*Action, string) {
	switch f.Kind {
	case Unverified, Quarantine:
		return nil, "" // informational: nothing to repair, nothing refused
	case Leak, PodNameHandle:
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
	case EarlyRelease:
		return planReclaim(f, recs, live)
	case Inconsistent:
		if f.Handle != "" && f.Address == "" && f.Block == "" {
			return &Action{Kind: FixHandleCount, Handle: f.Handle, Why: f.Why}, ""
		}
		return nil, "repair does not rewrite blocks or affinities; fix by hand"
	case Duplicate:
		return nil, "two owners: delete and recreate one of the pods (the address cannot be taken from either safely)"
	case OrphanRecord:
		return nil, "the runtime's DEL or GC removes it; repair does not delete records"
	}
	return nil, ""
}

func planReclaim(f Finding, recs map[string]*record.Record, live *liveness.View) (*Action, string) {
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
	if !live.Covers(rec.Node) || !live.ListsAttachment(rec.ContainerID, rec.IfName) {
		return nil, "no liveness source lists the record's attachment as running; re-claiming for a gone pod would leak the address"
	}
	return &Action{Kind: Reclaim, Handle: rec.Handle, Address: f.Address, Record: rec.Attachment.String(), rec: rec,
		Why: "re-claim the free address for the record that still holds it"}, ""
}

func recordsByName(snap *Snapshot) map[string]*record.Record {
	m := make(map[string]*record.Record, len(snap.Records))
	for _, r := range snap.Records {
		m[r.Attachment.String()] = r
	}
	return m
}

// Repairer applies actions with compare-and-swap Txns.
type Repairer struct {
	Client *clientv3.Client
	Snap   *Snapshot
	Live   *liveness.View
	// RecordsPrefix locates the records a reclaim compares.
	RecordsPrefix string
	// BeforeCommit, when set, runs before every Txn (tests race it).
	BeforeCommit func(a Action, attempt int)
	Now          func() time.Time
}

const maxAttempts = 5

// errStale means a fresh read no longer supports the action.
var errStale = errors.New("no longer applies")

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
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		txn, err := r.prepare(ctx, a)
		if errors.Is(err, errStale) {
			return "skipped: " + err.Error()
		}
		if err != nil {
			return "failed: " + err.Error()
		}
		if r.BeforeCommit != nil {
			r.BeforeCommit(a, attempt)
		}
		resp, err := txn.Commit()
		if err != nil {
			return "failed: " + err.Error()
		}
		if resp.Succeeded {
			return "done"
		}
	}
	return fmt.Sprintf("failed: lost the race %d times", maxAttempts)
}

func (r *Repairer) prepare(ctx context.Context, a Action) (clientv3.Txn, error) {
	switch a.Kind {
	case ReleaseHandle:
		return r.prepareRelease(ctx, a)
	case Reclaim:
		return r.prepareReclaim(ctx, a)
	case FixHandleCount:
		return r.prepareFixCount(ctx, a)
	}
	return nil, fmt.Errorf("unknown action %q", a.Kind)
}

// freshDocs re-reads the handle document and every block that holds the
// handle now (all blocks are scanned via the snapshot's block list plus
// the blocks the handle document names).
type freshDocs struct {
	handle    *calico.Handle
	handleRev int64 // 0: absent
	blocks    map[netip.Prefix]*freshBlock
}

func (r *Repairer) readHandle(ctx context.Context, handle string, extra ...netip.Prefix) (*freshDocs, error) {
	d := &freshDocs{blocks: map[netip.Prefix]*freshBlock{}}
	var h calico.Handle
	rev, err := calico.ReadJSON(ctx, r.Client, calico.HandleKey(handle), &h)
	if err != nil {
		return nil, err
	}
	if rev != 0 {
		d.handle, d.handleRev = &h, rev
	}
	cidrs := append([]netip.Prefix(nil), extra...)
	for cidr := range r.Snap.heldBy(handle) {
		cidrs = append(cidrs, cidr)
	}
	if d.handle != nil {
		for k := range d.handle.Block {
			if p, err := netip.ParsePrefix(k); err == nil {
				cidrs = append(cidrs, p)
			}
		}
	}
	for _, cidr := range cidrs {
		if _, done := d.blocks[cidr]; done {
			continue
		}
		doc, err := readBlock(ctx, r.Client, cidr)
		if err != nil {
			return nil, err
		}
		if doc != nil {
			d.blocks[cidr] = doc
		}
	}
	return d, nil
}

func readBlock(ctx context.Context, cli *clientv3.Client, cidr netip.Prefix) (*freshBlock, error) {
	key := calico.BlockKey(cidr)
	var raw json.RawMessage
	rev, err := calico.ReadJSON(ctx, cli, key, &raw)
	if err != nil || rev == 0 {
		return nil, err
	}
	var b calico.Block
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("decoding block %s: %w", cidr, err)
	}
	return &freshBlock{Key: key, ModRevision: rev, Block: &b, raw: raw}, nil
}

// txn compares every document read with its revision, then writes.
func (d *freshDocs) txn(ctx context.Context, cli *clientv3.Client, handle string, changed map[netip.Prefix]bool, extra ...clientv3.Cmp) (clientv3.Txn, error) {
	hkey := calico.HandleKey(handle)
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(hkey), "=", d.handleRev)}, extra...)
	var ops []clientv3.Op
	for cidr, doc := range d.blocks {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(doc.Key), "=", doc.ModRevision))
		if changed[cidr] {
			data, err := calico.MarshalKeeping(doc.raw, doc.Block)
			if err != nil {
				return nil, err
			}
			ops = append(ops, clientv3.OpPut(doc.Key, string(data)))
		}
	}
	if d.handle == nil || d.handle.Empty() {
		ops = append(ops, clientv3.OpDelete(hkey))
	} else {
		data, err := json.Marshal(d.handle)
		if err != nil {
			return nil, err
		}
		ops = append(ops, clientv3.OpPut(hkey, string(data)))
	}
	return cli.Txn(ctx).If(cmps...).Then(ops...), nil
}

func (r *Repairer) prepareRelease(ctx context.Context, a Action) (clientv3.Txn, error) {
	d, err := r.readHandle(ctx, a.Handle)
	if err != nil {
		return nil, err
	}
	if err := r.unchangedSinceAudit(a.Handle, d); err != nil {
		return nil, err
	}
	changed := map[netip.Prefix]bool{}
	for cidr, doc := range d.blocks {
		for _, ord := range doc.Block.OrdinalsOf(a.Handle) {
			if ip, err := doc.Block.IP(ord); err == nil && r.Live != nil && r.Live.ListsAddr(ip) {
				return nil, fmt.Errorf("%w: %s is now held by a live attachment", errStale, ip)
			}
		}
		if len(doc.Block.ReleaseHandle(a.Handle)) > 0 {
			changed[cidr] = true
		}
	}
	if len(changed) == 0 {
		return nil, fmt.Errorf("%w: handle %s holds nothing", errStale, a.Handle)
	}
	d.handle = nil
	return d.txn(ctx, r.Client, a.Handle, changed)
}

func (r *Repairer) prepareReclaim(ctx context.Context, a Action) (clientv3.Txn, error) {
	addr, err := netip.ParseAddr(a.Address)
	if err != nil {
		return nil, err
	}
	cidr, ok := r.blockOf(addr)
	if !ok {
		return nil, fmt.Errorf("%w: no block holds %s", errStale, addr)
	}
	d, err := r.readHandle(ctx, a.Handle, cidr)
	if err != nil {
		return nil, err
	}
	doc := d.blocks[cidr]
	if doc == nil {
		return nil, fmt.Errorf("%w: block %s is gone", errStale, cidr)
	}
	ord, err := doc.Block.Ordinal(addr)
	if err != nil {
		return nil, err
	}
	if _, taken := doc.Block.Attribute(ord); taken {
		return nil, fmt.Errorf("%w: %s is no longer free", errStale, addr)
	}
	recKey := etcdstore.Key(r.RecordsPrefix, a.rec.Node, a.rec.Attachment)
	if rev, err := calico.ReadJSON(ctx, r.Client, recKey, &struct{}{}); err != nil || rev != a.rec.Revision {
		return nil, fmt.Errorf("%w: record %s changed since the audit (%v)", errStale, a.rec.Attachment, err)
	}
	if err := doc.Block.AllocateOrdinal(ord, a.Handle, r.secondary(a.rec)); err != nil {
		return nil, fmt.Errorf("%w: %v", errStale, err)
	}
	if d.handle == nil {
		d.handle = calico.NewHandle()
	}
	d.handle.Add(cidr, 1)
	// The record must still be the committed one the audit read: a DEL
	// marks it first, and re-claiming for a pod being deleted would leak.
	return d.txn(ctx, r.Client, a.Handle, map[netip.Prefix]bool{cidr: true},
		clientv3.Compare(clientv3.ModRevision(recKey), "=", a.rec.Revision))
}

// unchangedSinceAudit: calico-ipam writes a handle and its block in two
// steps (handle first on ADD, block first on release), so a document
// pair caught between them looks like a leak or a miscount. Acting only
// on a handle document no newer than the audit, whose addresses per block
// are still those the audit saw (after the settle wait), leaves any
// operation that was in flight alone.
func (r *Repairer) unchangedSinceAudit(handle string, d *freshDocs) error {
	if d.handleRev > r.Snap.Revision {
		return fmt.Errorf("%w: handle %s changed since the audit; calico-ipam may be working on it, re-run", errStale, handle)
	}
	seen := r.Snap.heldBy(handle)
	for cidr, doc := range d.blocks {
		if n := len(doc.Block.OrdinalsOf(handle)); n != seen[cidr] {
			return fmt.Errorf("%w: handle %s holds %d addresses in %s, the audit saw %d; re-run", errStale, handle, n, cidr, seen[cidr])
		}
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

func (r *Repairer) prepareFixCount(ctx context.Context, a Action) (clientv3.Txn, error) {
	d, err := r.readHandle(ctx, a.Handle)
	if err != nil {
		return nil, err
	}
	if err := r.unchangedSinceAudit(a.Handle, d); err != nil {
		return nil, err
	}
	counts := calico.NewHandle()
	for cidr, doc := range d.blocks {
		if n := len(doc.Block.OrdinalsOf(a.Handle)); n > 0 {
			counts.Add(cidr, n)
		}
	}
	if d.handle != nil && sameCounts(d.handle.Block, counts.Block) {
		return nil, fmt.Errorf("%w: counts already match", errStale)
	}
	d.handle = counts
	return d.txn(ctx, r.Client, a.Handle, nil)
}

// freshBlock is a block as just read, with the revision its Txn compares
// and the bytes it was read from, whose unmodelled fields a rewrite keeps.
type freshBlock struct {
	Key         string
	ModRevision int64
	Block       *calico.Block
	raw         []byte
}
