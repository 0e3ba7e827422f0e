package guard

import (
	"context"

	"github.com/safe-ipam/safe-ipam/ipam/cni/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// delUnmarked is DEL when the store cannot write the releasing mark (a
// full disk, a store that refuses writes): failing on every retry would
// leave the pod's teardown stuck, where calico-ipam alone frees the
// address. The release goes ahead without the mark when it is provably
// safe (ownHandleOnly): the store reads a record of this attachment, so
// its allocation is no quarantine, and its addresses are under the
// container's own handle alone, which the release by container frees and
// nothing else. The record is then deleted (deleting needs no space); if
// even that fails, it stays, its addresses free in the delegate, and the
// GC of an attachment that no longer runs forgets it once the store takes
// writes: until then its index entries fence those addresses (a fenced
// ADD retries in a new sandbox) rather than hand them out twice. Anything
// else fails as before (markErr), and the runtime retries.
func (g *Guard) delUnmarked(ctx context.Context, att record.Attachment, env delegate.Env, args cniargs.Args, prev []byte, markErr error) error {
	rec, err := g.store.Get(ctx, att)
	if err != nil || !g.ownHandleOnly(rec) {
		return storeError("marking "+att.String(), markErr)
	}
	if err := g.release(ctx, att, env, args, prev); err != nil {
		return err
	}
	if _, err := g.store.Swap(ctx, att, rec, nil); err != nil {
		g.log.Warn("DEL could not mark the record releasing, released the container's own handle, and could not forget the record: GC forgets it once the store takes writes",
			"attachment", att.String(), "ips", rec.IPs, "mark", markErr, "error", err)
		return nil
	}
	g.log.Warn("DEL could not mark the record releasing: released the container's own handle and forgot the record", "attachment", att.String(), "ips", rec.IPs, "mark", markErr)
	return nil
}

// ownHandleOnly says whether rec, the record of its attachment, holds its
// addresses under the container's own handle alone, and no live process
// works on it (an ADD in flight would commit what the release frees).
func (g *Guard) ownHandleOnly(rec *record.Record) bool {
	return rec != nil && rec.Handle == g.handle(rec.Attachment) && len(rec.Quarantined) == 0 && rec.SharedWith == nil &&
		(rec.State == record.Committed || !rec.Owner.Alive())
}
