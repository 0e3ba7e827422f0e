package calicosim

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// ReleaseHandle frees every address of handle in every block and deletes
// the handle. A handle that does not exist is already released: that is
// success, with nothing freed.
func (a *Allocator) ReleaseHandle(ctx context.Context, handle string) ([]netip.Addr, error) {
	st := a.store()
	freed, err := retry(ctx, a.maxAttempts(), func() ([]netip.Addr, error) {
		return a.tryReleaseHandle(ctx, st, handle)
	})
	if err != nil {
		return nil, fmt.Errorf("releasing handle %s: %w", handle, err)
	}
	a.log().Debug("released handle", "handle", handle, "ips", freed)
	return freed, nil
}

func (a *Allocator) tryReleaseHandle(ctx context.Context, st store, handle string) ([]netip.Addr, error) {
	h, err := st.readHandle(ctx, handle)
	if err != nil || h.handle == nil {
		return nil, err
	}
	var changed []*blockRef
	var freed []netip.Addr
	for _, c := range slices.Sorted(maps.Keys(h.handle.Block)) {
		cidr, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("handle %s names block %q: %w", handle, c, err)
		}
		ref, ips, err := a.releaseInBlock(ctx, st, cidr, handle)
		if err != nil {
			return nil, err
		}
		if len(ips) > 0 {
			changed, freed = append(changed, ref), append(freed, ips...)
		}
	}
	// The handle goes even if its counts were stale: nothing of it is left.
	return freed, st.commitRelease(ctx, h, changed, func(h *calico.Handle) { h.Block = map[string]int{} })
}

// releaseInBlock frees handle's addresses in the block as read, without
// writing it.
func (a *Allocator) releaseInBlock(ctx context.Context, st store, cidr netip.Prefix, handle string) (*blockRef, []netip.Addr, error) {
	ref, err := st.readBlock(ctx, cidr)
	if err != nil {
		return nil, nil, err
	}
	if ref == nil {
		a.log().Warn("handle names a missing block", "handle", handle, "block", cidr)
		return nil, nil, nil
	}
	ords := ref.block.ReleaseHandle(handle)
	ips := make([]netip.Addr, len(ords))
	for i, ord := range ords {
		if ips[i], err = ref.block.IP(ord); err != nil {
			return nil, nil, err
		}
	}
	return ref, ips, nil
}

// Release frees one assignment, for example to undo the first address of
// a dual-stack ADD whose second failed. An address no longer held by the
// handle is left alone.
func (a *Allocator) Release(ctx context.Context, asg Assignment) error {
	st := a.store()
	_, err := retry(ctx, a.maxAttempts(), func() (struct{}, error) {
		return struct{}{}, a.tryRelease(ctx, st, asg)
	})
	if err != nil {
		return fmt.Errorf("releasing %s of handle %s: %w", asg.IP, asg.Handle, err)
	}
	return nil
}

func (a *Allocator) tryRelease(ctx context.Context, st store, asg Assignment) error {
	ref, err := st.readBlock(ctx, asg.Block)
	if err != nil || ref == nil {
		return err
	}
	ord, err := ref.block.Ordinal(asg.IP)
	if err != nil {
		return err
	}
	if attr, ok := ref.block.Attribute(ord); !ok || attr.Handle() != asg.Handle {
		return nil
	}
	if err := ref.block.Release(ord); err != nil {
		return err
	}
	h, err := st.readHandle(ctx, asg.Handle)
	if err != nil {
		return err
	}
	return st.commitRelease(ctx, h, []*blockRef{ref}, func(h *calico.Handle) { h.Remove(asg.Block, 1) })
}
