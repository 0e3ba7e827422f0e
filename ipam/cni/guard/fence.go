package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// fenced is how an ADD ends that must not release what the delegate gave
// it: the allocation is quarantined, or left under the pending record for
// the next ADD, DEL or GC. commitFailed returns err as it is.
type fenced struct {
	err error
	// node: the fence itself failed for a reason of the node's (the
	// store did not take the quarantine), which NodeFailing counts.
	node bool
}

func (f *fenced) Error() string { return f.err.Error() }
func (f *fenced) Unwrap() error { return f.err }

// fence handles an ADD whose delegate gave it an address that a committed
// record holds: the address was freed behind its holder's back (a late
// DEL by pod name on a node without safe-ipam, a manual release). It is
// never returned to the runtime. Releasing it would put it back on the
// free list for the next ADD, so the allocation stays, as a quarantine
// tied to the holder and released with it, and the ADD fails with 11: the
// runtime retries in a new sandbox, whose own handle starts clean. If the
// holder changes meanwhile (it may be gone), the commit is tried again.
func (g *Guard) fence(ctx context.Context, pending, committed *record.Record, held *store.HeldError) error {
	att := pending.Attachment
	for attempt := 0; attempt < 3; attempt++ {
		err := g.store.Quarantine(ctx, pending, held.Holder, quarantineOf(committed))
		if err == nil {
			g.log.Warn("ADD was given an address a running attachment holds: quarantined with the holder, not returned",
				"attachment", att.String(), "address", held.Addr, "holder", held.Holder.Attachment.String())
			return &fenced{err: types.NewError(types.ErrTryAgainLater, fmt.Sprintf(
				"%s: %s gave %s, which %s holds (it was freed behind that attachment's back); the allocation is quarantined until %s is released; start the pod in a new sandbox",
				att, g.delegate.Type, held.Addr, held.Holder.Attachment, held.Holder.Attachment), "")}
		}
		if !errors.Is(err, store.ErrConflict) {
			g.log.Error("ADD was given a held address and could not quarantine it; the pending record keeps it", "attachment", att.String(), "address", held.Addr, "error", err)
			return &fenced{err: storeError("quarantining "+att.String(), err), node: true}
		}
		if _, err = g.store.Commit(ctx, pending, committed); err == nil || !errors.As(err, &held) {
			return err
		}
	}
	return &fenced{err: types.NewError(types.ErrTryAgainLater, fmt.Sprintf("%s: the holder of %s kept changing while fencing; try again", att, held.Addr), "")}
}

// quarantineOf is the quarantine of committed's allocation. A VM pod's
// keeps the pod's identity and its VM's handle, where Calico keeps the
// allocation: a release by container alone would never free it.
func quarantineOf(committed *record.Record) record.Quarantine {
	q := record.Quarantine{Attachment: committed.Attachment, IPs: committed.IPs}
	if record.SharedHandle(committed.Network, committed.Handle) {
		q.Handle, q.PodNamespace, q.PodName, q.PodUID = committed.Handle, committed.PodNamespace, committed.PodName, committed.PodUID
	}
	return q
}

// QuarantineFate settles one allocation quarantined with holder before
// the quarantine is forgotten: Forget's caller decides (uninstall
// re-claims it for a holder that runs). An error keeps the quarantine.
type QuarantineFate func(ctx context.Context, holder *record.Record, q record.Quarantine) error

// quarantineBatch is how many quarantines are released before they are
// forgotten.
const quarantineBatch = 32
