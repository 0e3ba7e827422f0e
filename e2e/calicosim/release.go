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
// the handle, in one transaction. A handle that does not exist is already
// released: that is success, with nothing freed.
func (a *Allocator) ReleaseHandle(ctx context.Context, handle string) ([]netip.Addr, error) {
	freed, err := retry(ctx, a.maxAttempts(), func() ([]netip.Addr, error) {
		return a.tryReleaseHandle(ctx, handle)
	})
	if err != nil {
		return nil, fmt.Errorf("releasing handle %s: %w", handle, err)
	}
	a.log().Debug("released handle", "handle", handle, "ips", freed)
	return freed, nil
}

func (a *Allocator) tryReleaseHandle(ctx context.Context, handle string) ([]netip.Addr, error) {
	var h calico.Handle
	hKey := calico.HandleKey(handle)
	hRev, err := calico.ReadJSON(ctx, a.Client, hKey, &h)
	if err != nil || hRev == 0 {
		return nil, err
	}
	var t txn
	t.guard(hKey, hRev)
	t.delete(hKey)
	var freed []netip.Addr
	for _, c := range slices.Sorted(maps.Keys(h.Block)) {
		cidr, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("handle %s names block %q: %w", handle, c, err)
		}
		ips, err := a.releaseInBlock(ctx, &t, cidr, handle)
		if err != nil {
			return nil, err
		}
		freed = append(freed, ips...)
	}
	return freed, t.commit(ctx, a.Client)
}

// releaseInBlock adds to t the release of handle's addresses in one block.
func (a *Allocator) releaseInBlock(ctx context.Context, t *txn, cidr netip.Prefix, handle string) ([]netip.Addr, error) {
	var blk calico.Block
	key := calico.BlockKey(cidr)
	rev, err := calico.ReadJSON(ctx, a.Client, key, &blk)
	if err != nil {
		return nil, err
	}
	t.guard(key, rev)
	if rev == 0 {
		a.log().Warn("handle names a missing block", "handle", handle, "block", cidr)
		return nil, nil
	}
	ords := blk.ReleaseHandle(handle)
	if len(ords) == 0 {
		return nil, nil
	}
	t.put(key, &blk)
	ips := make([]netip.Addr, len(ords))
	for i, ord := range ords {
		if ips[i], err = blk.IP(ord); err != nil {
			return nil, err
		}
	}
	return ips, nil
}

// Release frees one assignment, for example to undo the first address of
// a dual-stack ADD whose second failed. An address no longer held by the
// handle is left alone.
func (a *Allocator) Release(ctx context.Context, asg Assignment) error {
	_, err := retry(ctx, a.maxAttempts(), func() (struct{}, error) {
		return struct{}{}, a.tryRelease(ctx, asg)
	})
	if err != nil {
		return fmt.Errorf("releasing %s of handle %s: %w", asg.IP, asg.Handle, err)
	}
	return nil
}

func (a *Allocator) tryRelease(ctx context.Context, asg Assignment) error {
	var blk calico.Block
	bKey := calico.BlockKey(asg.Block)
	rev, err := calico.ReadJSON(ctx, a.Client, bKey, &blk)
	if err != nil || rev == 0 {
		return err
	}
	ord, err := blk.Ordinal(asg.IP)
	if err != nil {
		return err
	}
	if attr, ok := blk.Attribute(ord); !ok || attr.Handle() != asg.Handle {
		return nil
	}
	if err := blk.Release(ord); err != nil {
		return err
	}
	var h calico.Handle
	hKey := calico.HandleKey(asg.Handle)
	hRev, err := calico.ReadJSON(ctx, a.Client, hKey, &h)
	if err != nil {
		return err
	}
	var t txn
	t.guard(bKey, rev)
	t.guard(hKey, hRev)
	t.put(bKey, &blk)
	if hRev != 0 {
		if h.Remove(asg.Block, 1); h.Empty() {
			t.delete(hKey)
		} else {
			t.put(hKey, &h)
		}
	}
	return t.commit(ctx, a.Client)
}
