package install

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// A quarantine exists because Calico handed a running pod's address (its
// holder's) to another sandbox: Calico no longer holds it under the
// holder's handle. Released at uninstall, the address would be free for
// the next ADD while the holder uses it. Kept under the fenced sandbox's
// handle, it would be freed later all the same: no DEL comes for that
// sandbox, so kube-controllers' leak GC releases it once the fenced pod
// is gone (or no longer has the address). So uninstall makes Calico's
// data true instead: the address goes back under the holder's own handle,
// as repair's re-claim of an early release does, and Calico alone then
// keeps it until the holder's own DEL. Where it cannot (Calico's
// datastore does not answer or refuses the write, the holder's record
// names no handle), it keeps the allocation and names the holders to
// restart before the fenced pods go.

// Reclaimer gives the quarantines of running holders their fate at
// uninstall (Fate, a guard.QuarantineFate): each allocation re-claimed
// for its holder in Calico's datastore, or kept and its holder named.
type Reclaimer struct {
	// Calico opens the datastore calico-ipam uses, on the first
	// quarantine.
	Calico datastore.Settings
	// Network and Handles are the config's, to name the fenced sandbox's
	// handle.
	Network, Handles string
	// Now stamps the allocation's attributes.
	Now func() time.Time

	ds        datastore.Datastore
	closeDS   func()
	Reclaimed int
	// Rekeyed counts the records whose addresses went under their pod's
	// name (pod mode).
	Rekeyed int
	// Kept are the holders whose quarantine stays under the fenced
	// sandbox's handle, and why.
	Kept []string
}

// NewReclaimer is the Reclaimer for cfg, read from the config at path.
func NewReclaimer(cfg *config.Config, path string) *Reclaimer {
	return &Reclaimer{Calico: admin.CalicoSettings(cfg.Calico, path), Network: cfg.Network, Handles: cfg.DelegateHandles, Now: time.Now}
}

// Close closes the datastore, if it was opened.
func (r *Reclaimer) Close() {
	if r.closeDS != nil {
		r.closeDS()
	}
}

// FateOf is the fate of the quarantines of rec at uninstall: a holder
// whose DEL or GC had begun does not run, and its quarantines are
// released as that DEL would have (nil: guard.Forget releases); any other
// holder is taken to run (fail closed), and its quarantined addresses are
// re-claimed for it.
func (r *Reclaimer) FateOf(rec *record.Record) guard.QuarantineFate {
	if rulebook.UninstallQuarantines(rec, false).Release {
		return nil
	}
	return r.Fate
}

// keepIt is why an allocation cannot be re-claimed and is kept: nothing
// to move it under, or nothing left to move. Any other failure (Calico's
// datastore does not answer, keeps changing) fails the forget, which
// keeps the quarantine for the next run.
type keepIt struct{ why string }

func (k *keepIt) Error() string { return k.why }

// Fate re-claims q's addresses for holder; where there is nothing to
// re-claim under or nothing left to move, it keeps the allocation and
// notes the holder.
func (r *Reclaimer) Fate(ctx context.Context, holder *record.Record, q record.Quarantine) error {
	err := r.reclaim(ctx, holder, q)
	var keep *keepIt
	switch {
	case err == nil:
		r.Reclaimed++
		return nil
	case !errors.As(err, &keep):
		return fmt.Errorf("re-claiming the quarantine of %s for %s in Calico's datastore (or run with --release-quarantines): %w", q.Attachment, holder.Attachment, err)
	}
	r.Kept = append(r.Kept, fmt.Sprintf("%s (%s: %v)", podOf(holder), strings.Join(q.IPs, ","), err))
	return nil
}

// podOf names a holder as an operator restarts it.
func podOf(rec *record.Record) string {
	if rec.PodNamespace != "" && rec.PodName != "" {
		return "pod " + rec.PodNamespace + "/" + rec.PodName
	}
	return "the pod of " + rec.Attachment.String()
}

func (r *Reclaimer) reclaim(ctx context.Context, holder *record.Record, q record.Quarantine) error {
	if holder.Handle == "" {
		return &keepIt{"its record names no handle"}
	}
	if err := r.open(ctx); err != nil {
		return err
	}
	for _, ip := range q.IPs {
		addr, ok := record.ParseAddr(ip)
		if !ok {
			return &keepIt{fmt.Sprintf("%q is no address", ip)}
		}
		if err := r.move(ctx, holder, r.fencedHandles(q), addr); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reclaimer) open(ctx context.Context) error {
	if r.ds != nil {
		return nil
	}
	ds, closeDS, err := datastore.OpenCalico(ctx, r.Calico)
	if err != nil {
		return err
	}
	r.ds, r.closeDS = ds, closeDS
	return nil
}

// podHandle is, in pod mode (delegateHandles: pod), the handle Calico
// 2.x's DEL of rec's pod releases (namespace.podname), "" elsewhere: in
// pod mode safe-ipam had calico-ipam key rec's addresses by container, a
// handle Calico 2.x's DEL by pod name never frees once safe-ipam is gone.
func (r *Reclaimer) podHandle(rec *record.Record) string {
	if r.Handles != config.HandlesPod || rec.PodNamespace == "" || rec.PodName == "" {
		return ""
	}
	return rec.PodNamespace + "." + rec.PodName
}

// ownHandle is the handle rec's addresses must be under for Calico alone
// to free them on its pod's DEL.
func (r *Reclaimer) ownHandle(rec *record.Record) string {
	if h := r.podHandle(rec); h != "" {
		return h
	}
	return rec.Handle
}

// Rekey leaves, in pod mode, the addresses of rec in the form Calico
// alone frees on its pod's DEL: under namespace.podname, as Calico 2.x
// would have allocated them (never worse than Calico alone). It moves
// every address Calico holds under rec's container handle, whatever the
// record's state: a committed record's pod runs; a pending one's ADD may
// have been given addresses it does not list yet; a releasing one's DEL
// had begun, and the runtime's retry now reaches Calico 2.x alone, which
// frees only the pod-name handle. Elsewhere it does nothing.
func (r *Reclaimer) Rekey(ctx context.Context, rec *record.Record) error {
	to := r.podHandle(rec)
	if to == "" || rec.Handle == "" || rec.Handle == to {
		return nil
	}
	if err := r.open(ctx); err != nil {
		return err
	}
	addrs, err := r.heldBy(ctx, rec.Handle)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		var keep *keepIt
		if err := r.move(ctx, rec, []string{rec.Handle}, addr); err != nil && !errors.As(err, &keep) {
			return fmt.Errorf("moving %s of %s under %s in Calico's datastore: %w", addr, rec.Attachment, to, err)
		}
	}
	if len(addrs) > 0 {
		r.Rekeyed++
	}
	return nil
}

// heldBy lists the addresses Calico holds under handle.
func (r *Reclaimer) heldBy(ctx context.Context, handle string) ([]netip.Addr, error) {
	h, err := r.ds.Handle(ctx, handle)
	if err != nil || h == nil || h.Handle == nil {
		return nil, err
	}
	var out []netip.Addr
	for k := range h.Handle.Block {
		cidr, err := netip.ParsePrefix(k)
		if err != nil {
			continue
		}
		b, err := r.ds.Block(ctx, cidr)
		if err != nil {
			return nil, err
		}
		if b == nil {
			continue
		}
		for _, ord := range b.Block.OrdinalsOf(handle) {
			if ip, err := b.Block.IP(ord); err == nil {
				out = append(out, ip)
			}
		}
	}
	return out, nil
}

// move puts addr, held under one of the handles from, under the
// holder's own handle (ownHandle), retrying when calico-ipam wrote
// meanwhile.
func (r *Reclaimer) move(ctx context.Context, holder *record.Record, from []string, addr netip.Addr) error {
	for attempt := 0; attempt < 3; attempt++ {
		err := r.moveOnce(ctx, holder, from, addr)
		if !errors.Is(err, datastore.ErrConflict) {
			return err
		}
	}
	return errors.New("Calico's data kept changing while re-claiming")
}

func (r *Reclaimer) moveOnce(ctx context.Context, holder *record.Record, fromIDs []string, addr netip.Addr) error {
	own := r.ownHandle(holder)
	from, b, err := r.heldUnder(ctx, own, fromIDs, addr)
	if err != nil || b == nil {
		return err // b nil: the holder's handle has it already
	}
	ord, err := b.Block.Ordinal(addr)
	if err != nil {
		return err
	}
	if err := b.Block.Release(ord); err != nil {
		return err
	}
	if err := b.Block.AllocateOrdinal(ord, own, r.attributes(holder)); err != nil {
		return err
	}
	to, err := r.ds.Handle(ctx, own)
	if err != nil {
		return err
	}
	if to == nil {
		to = &datastore.Handle{ID: own}
	}
	if to.Handle == nil {
		to.Handle = calico.NewHandle()
	}
	to.Handle.Add(b.Block.CIDR, 1)
	// The holder's handle is counted first, then the block moves, as
	// calico-ipam allocates; the fenced handle's count drops last. A
	// run cut short leaves that count one too high, which the audit
	// reports and fix-handle-count repairs: never an address no handle
	// document names.
	if err := r.ds.Write(ctx, datastore.Change{Blocks: []*datastore.Block{b}, Handle: to, HandleFirst: true}); err != nil {
		return err
	}
	from.Handle.Remove(b.Block.CIDR, 1)
	return r.ds.Write(ctx, datastore.Change{Handle: from})
}

// heldUnder finds the handle of from that holds addr, and its block; a
// nil block when the holder's own handle holds it already (a run cut
// short after the move).
func (r *Reclaimer) heldUnder(ctx context.Context, own string, from []string, addr netip.Addr) (*datastore.Handle, *datastore.Block, error) {
	for _, id := range from {
		if h, b, err := r.blockHolding(ctx, id, addr); err != nil || b != nil {
			return h, b, err
		}
	}
	if _, b, err := r.blockHolding(ctx, own, addr); err != nil || b != nil {
		return nil, nil, err
	}
	return nil, nil, &keepIt{fmt.Sprintf("Calico holds %s under none of %s", addr, strings.Join(from, ", "))}
}

// blockHolding reads handle id and the block in which it holds addr; a
// nil block when it does not.
func (r *Reclaimer) blockHolding(ctx context.Context, id string, addr netip.Addr) (*datastore.Handle, *datastore.Block, error) {
	h, err := r.ds.Handle(ctx, id)
	if err != nil || h == nil || h.Handle == nil {
		return nil, nil, err
	}
	for k := range h.Handle.Block {
		cidr, err := netip.ParsePrefix(k)
		if err != nil || !cidr.Contains(addr) {
			continue
		}
		b, err := r.ds.Block(ctx, cidr)
		if err != nil || b == nil {
			return nil, nil, err
		}
		if held, err := b.Block.HandleOf(addr); err != nil || held != id {
			return nil, nil, err
		}
		return h, b, nil
	}
	return nil, nil, nil
}

// fencedHandles are the handles Calico may keep a quarantined allocation
// under: a VM pod's VM handle, or the fenced container's own.
func (r *Reclaimer) fencedHandles(q record.Quarantine) []string {
	if q.Handle != "" {
		return []string{q.Handle}
	}
	if r.Handles == config.HandlesPod {
		return []string{q.ContainerID}
	}
	return []string{r.Network + "." + q.ContainerID}
}

// attributes are those Calico 3.x writes for a pod's address.
func (r *Reclaimer) attributes(holder *record.Record) map[string]string {
	s := map[string]string{"node": holder.Node, "timestamp": r.Now().UTC().String()}
	if holder.PodNamespace != "" && holder.PodName != "" {
		s["namespace"], s["pod"] = holder.PodNamespace, holder.PodName
	}
	return s
}
