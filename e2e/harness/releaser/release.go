package releaser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

// releaseIPs is Calico's ReleaseIPs: per block, the block is rewritten
// (or deleted when it ends up empty and affine to no node), then each
// handle's count goes down, the handle deleted at zero.
func releaseIPs(ctx context.Context, st calicoStore, log *slog.Logger, opts []releaseOpt) error {
	var errs []error
	for _, cidr := range blocksOf(opts) {
		errs = append(errs, releaseFromBlock(ctx, st, log, cidr, inBlock(opts, cidr)))
	}
	return errors.Join(errs...)
}

// releaseFromBlock is releaseIPsFromBlock. Once the block is written the
// addresses are free: a handle that cannot be decremented is only logged.
func releaseFromBlock(ctx context.Context, st calicoStore, log *slog.Logger, cidr netip.Prefix, opts []releaseOpt) error {
	for range datastoreRetries {
		b, err := st.Block(ctx, cidr)
		if err != nil || b == nil {
			return err
		}
		counts, err := release(b.Block, opts)
		if err != nil || len(counts) == 0 {
			return err
		}
		if empty(b.Block) && b.Block.Affinity == nil {
			err = st.deleteBlock(ctx, b)
		} else {
			err = st.Write(ctx, datastore.Change{Blocks: []*datastore.Block{b}})
		}
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return err
		}
		for _, h := range sortedKeys(counts) {
			if err := decrementHandle(ctx, st, h, cidr, counts[h]); err != nil {
				log.Warn("failed to decrement handle", "handle", h, "block", cidr, "err", err)
			}
		}
		return nil
	}
	return fmt.Errorf("block %s: max retries hit", cidr)
}

// decrementHandle is decrementHandle: the handle document is rewritten
// with n fewer addresses in cidr, or deleted when it holds none.
func decrementHandle(ctx context.Context, st calicoStore, id string, cidr netip.Prefix, n int) error {
	for range datastoreRetries {
		h, err := st.Handle(ctx, id)
		if err != nil {
			return err
		}
		if h == nil {
			return fmt.Errorf("handle %s does not exist", id)
		}
		if err := decrement(h.Handle, id, cidr.String(), n); err != nil {
			return err
		}
		if err := st.Write(ctx, datastore.Change{Handle: h}); !errors.Is(err, errConflict) {
			return err
		}
	}
	return fmt.Errorf("handle %s: max retries hit", id)
}

// releaseHostAffinities is ReleaseHostAffinities: every block affine to
// node, IPv4 then IPv6, as releaseBlockAffinity; a block that fails does
// not stop the others, and the last failure is returned.
func releaseHostAffinities(ctx context.Context, st calicoStore, node string, mustBeEmpty bool) error {
	cidrs, err := st.affinities(ctx, node)
	if err != nil {
		return err
	}
	var stored error
	for _, cidr := range cidrs {
		for range datastoreRetries {
			err = releaseBlockAffinity(ctx, st, node, cidr, mustBeEmpty)
			if !errors.Is(err, errConflict) {
				break
			}
		}
		if err != nil {
			stored = err
		}
	}
	return stored
}

// releaseBlockAffinity marks the affinity pendingDeletion, deletes the
// block when empty or else makes it affine to no node, then deletes the
// affinity. An affinity the block does not name is stale and only
// deleted; with mustBeEmpty, a block in use is errNotEmpty.
func releaseBlockAffinity(ctx context.Context, st calicoStore, node string, cidr netip.Prefix, mustBeEmpty bool) error {
	aff, err := st.affinity(ctx, node, cidr)
	if err != nil || aff == nil {
		return err
	}
	b, err := st.Block(ctx, cidr)
	if err != nil || b == nil {
		return err
	}
	if !affineTo(b.Block, node) {
		_ = st.deleteAffinity(ctx, aff)
		return nil
	}
	if mustBeEmpty && !empty(b.Block) {
		return errNotEmpty
	}
	aff.affinity.State = calico.AffinityPendingDeletion
	if err := st.putAffinity(ctx, aff); err != nil {
		return err
	}
	if empty(b.Block) {
		err = st.deleteBlock(ctx, b)
	} else {
		dropAffinity(b.Block)
		err = st.Write(ctx, datastore.Change{Blocks: []*datastore.Block{b}})
	}
	if err != nil {
		return err
	}
	return st.deleteAffinity(ctx, aff)
}

// blocksOf lists the blocks of opts, in order.
func blocksOf(opts []releaseOpt) []netip.Prefix {
	var out []netip.Prefix
	for _, o := range opts {
		if !slices.Contains(out, o.block) {
			out = append(out, o.block)
		}
	}
	return out
}

func inBlock(opts []releaseOpt, cidr netip.Prefix) []releaseOpt {
	var out []releaseOpt
	for _, o := range opts {
		if o.block == cidr {
			out = append(out, o)
		}
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
