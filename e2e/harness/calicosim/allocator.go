package calicosim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// ErrNoFreeIPs means the node's blocks are full and its pools have no
// unclaimed block. The simulator never borrows from other nodes' blocks.
var ErrNoFreeIPs = errors.New("no more free IPs")

const defaultMaxAttempts = 100

// Allocator assigns and releases addresses for one node in Calico's
// layout, in etcd (Client) or, when Kube is set, in the Kubernetes
// datastore. It is safe for concurrent use, also across processes: every
// write is guarded by the versions of what it read (etcd revisions or
// resourceVersions), and a lost race starts the attempt over.
type Allocator struct {
	Client *clientv3.Client
	// Kube, when set, selects the Kubernetes datastore (KDD) instead of
	// etcd.
	Kube dynamic.Interface
	Node string
	// Now is the clock for claim times and sequence numbers; nil means
	// time.Now.
	Now func() time.Time
	// Log receives debug output; nil discards it.
	Log *slog.Logger
	// MaxAttempts bounds retries after lost races; 0 means 100.
	MaxAttempts int
}

// Assignment is one address held by a handle.
type Assignment struct {
	IP     netip.Addr
	Block  netip.Prefix
	Handle string
}

// Prefix is the address with its block's mask, as calico-ipam reports it.
func (a Assignment) Prefix() netip.Prefix { return netip.PrefixFrom(a.IP, a.Block.Bits()) }

func (a *Allocator) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Allocator) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// store is the datastore the allocator works on.
func (a *Allocator) store() store {
	if a.Kube != nil {
		return &kubeStore{dyn: a.Kube, log: a.log()}
	}
	return etcdStore{cli: a.Client, log: a.log()}
}

func (a *Allocator) maxAttempts() int {
	if a.MaxAttempts > 0 {
		return a.MaxAttempts
	}
	return defaultMaxAttempts
}

// retry runs op until it does not lose a race, pausing a random moment
// between attempts so that racing writers spread out.
func retry[T any](ctx context.Context, max int, op func() (T, error)) (T, error) {
	var zero T
	for attempt := 1; ; attempt++ {
		v, err := op()
		if !errors.Is(err, errConflict) {
			return v, err
		}
		if attempt >= max {
			return zero, fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		wait := time.Duration(rand.Int64N(int64(min(attempt, 10)) * int64(2*time.Millisecond)))
		select {
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Assign gives handle one address from pools, all of one family: from a
// block affine to the node if one has room, else from a newly claimed one.
func (a *Allocator) Assign(ctx context.Context, pools []calico.IPPool, handle string, secondary map[string]string) (Assignment, error) {
	fam, err := poolsFamily(pools)
	if err != nil {
		return Assignment{}, err
	}
	st := a.store()
	asg, err := retry(ctx, a.maxAttempts(), func() (Assignment, error) {
		return a.tryAssign(ctx, st, fam, pools, handle, secondary)
	})
	if err != nil {
		return Assignment{}, fmt.Errorf("assigning an %s address to handle %s: %w", fam, handle, err)
	}
	a.log().Debug("assigned", "ip", asg.IP, "block", asg.Block, "handle", handle)
	return asg, nil
}

// tryAssign makes one attempt; errConflict means re-read and retry.
func (a *Allocator) tryAssign(ctx context.Context, st store, fam calico.Family, pools []calico.IPPool, handle string, secondary map[string]string) (Assignment, error) {
	ref, err := a.affineBlockWithRoom(ctx, st, fam, pools)
	if err != nil {
		return Assignment{}, err
	}
	if ref == nil {
		if ref, err = a.claimBlock(ctx, st, fam, pools); err != nil {
			return Assignment{}, err
		}
	}
	return allocateIn(ctx, st, ref, handle, secondary)
}

// allocateIn takes one address of the block ref for handle and commits
// the block, guarded by the version it was read at.
func allocateIn(ctx context.Context, st store, ref *blockRef, handle string, secondary map[string]string) (Assignment, error) {
	ords, err := ref.block.Allocate(1, handle, secondary)
	if err != nil {
		return Assignment{}, err
	}
	if err := st.commitAllocation(ctx, ref, handle); err != nil {
		return Assignment{}, err
	}
	ip, err := ref.block.IP(ords[0])
	if err != nil {
		return Assignment{}, err
	}
	return Assignment{IP: ip, Block: ref.block.CIDR, Handle: handle}, nil
}

// Borrow gives handle one address from block, which another node's
// affinity holds: what calico-ipam does for this node when its own blocks
// are full, no block is left to claim and strictAffinity is off. Assign
// never borrows (ErrNoFreeIPs instead), so a test borrows on purpose.
func (a *Allocator) Borrow(ctx context.Context, block netip.Prefix, handle string, secondary map[string]string) (Assignment, error) {
	st := a.store()
	asg, err := retry(ctx, a.maxAttempts(), func() (Assignment, error) {
		ref, err := st.readBlock(ctx, block)
		if err != nil {
			return Assignment{}, err
		}
		if ref == nil {
			return Assignment{}, fmt.Errorf("block %s does not exist", block)
		}
		return allocateIn(ctx, st, ref, handle, secondary)
	})
	if err != nil {
		return Assignment{}, fmt.Errorf("borrowing an address of block %s for handle %s: %w", block, handle, err)
	}
	return asg, nil
}

func poolsFamily(pools []calico.IPPool) (calico.Family, error) {
	if len(pools) == 0 {
		return 0, ErrNoPool
	}
	var fam calico.Family
	for i, p := range pools {
		cidr, err := p.Prefix()
		if err != nil {
			return 0, err
		}
		if _, err := p.EffectiveBlockSize(); err != nil {
			return 0, err
		}
		if f := calico.FamilyOf(cidr.Addr()); i == 0 {
			fam = f
		} else if f != fam {
			return 0, fmt.Errorf("pools %v mix address families", poolCIDRs(pools))
		}
	}
	return fam, nil
}

// inPools reports whether a block lies inside one of the pools.
func inPools(block netip.Prefix, pools []calico.IPPool) bool {
	for _, p := range pools {
		cidr, err := p.Prefix()
		if err == nil && cidr.Bits() <= block.Bits() && cidr.Contains(block.Addr()) {
			return true
		}
	}
	return false
}

// affineBlockWithRoom returns the lowest block in pools that the node
// holds with a confirmed affinity and that has a free address, or nil.
func (a *Allocator) affineBlockWithRoom(ctx context.Context, st store, fam calico.Family, pools []calico.IPPool) (*blockRef, error) {
	cidrs, err := st.affineBlocks(ctx, a.Node, fam)
	if err != nil {
		return nil, err
	}
	for _, cidr := range cidrs {
		if !inPools(cidr, pools) {
			continue
		}
		ref, err := st.readBlock(ctx, cidr)
		if err != nil {
			return nil, err
		}
		if ref == nil {
			continue
		}
		if node, ok := ref.block.AffinityNode(); !ok || node != a.Node || ref.block.FreeCount() == 0 {
			continue
		}
		return ref, nil
	}
	return nil, nil
}

// claimBlock claims for the node the first block of the pools that does
// not exist yet. Calico picks a pseudo-random one, seeded by the host
// name; the first free one is as good for tests and easier to predict.
func (a *Allocator) claimBlock(ctx context.Context, st store, fam calico.Family, pools []calico.IPPool) (*blockRef, error) {
	existing, err := st.blocks(ctx, fam)
	if err != nil {
		return nil, err
	}
	cidr, ok := firstFreeBlock(pools, existing)
	if !ok {
		return nil, fmt.Errorf("%w in pools %v for node %s", ErrNoFreeIPs, poolCIDRs(pools), a.Node)
	}
	now := a.now()
	blk, err := calico.NewBlock(cidr, uint64(now.UnixNano()))
	if err != nil {
		return nil, err
	}
	blk.ClaimFor(a.Node, now)
	ref, err := st.claim(ctx, a.Node, blk)
	if err != nil {
		return nil, fmt.Errorf("claiming block %s: %w", cidr, err)
	}
	a.log().Debug("claimed block", "block", cidr, "node", a.Node)
	return ref, nil
}

// firstFreeBlock walks each pool's blocks from its start and returns the
// first that overlaps no existing block. The walk ends after at most
// len(existing)+1 steps per pool for same-sized blocks, so huge IPv6
// pools are cheap.
func firstFreeBlock(pools []calico.IPPool, existing []netip.Prefix) (netip.Prefix, bool) {
	for _, p := range pools {
		cidr, err := p.Prefix()
		if err != nil {
			continue
		}
		size, err := p.EffectiveBlockSize()
		if err != nil {
			continue
		}
		for cand, ok := netip.PrefixFrom(cidr.Addr(), size), true; ok && cidr.Contains(cand.Addr()); cand, ok = nextPrefix(cand) {
			if !slices.ContainsFunc(existing, cand.Overlaps) {
				return cand, true
			}
		}
	}
	return netip.Prefix{}, false
}

// nextPrefix returns the prefix of the same length right after p, false
// at the end of the address space.
func nextPrefix(p netip.Prefix) (netip.Prefix, bool) {
	b := p.Masked().Addr().AsSlice()
	bit := p.Bits() - 1
	if bit < 0 {
		return netip.Prefix{}, false
	}
	carry := 1 << (7 - bit%8)
	for i := bit / 8; i >= 0 && carry > 0; i-- {
		sum := int(b[i]) + carry
		b[i], carry = byte(sum), sum>>8
	}
	if carry > 0 {
		return netip.Prefix{}, false
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(addr, p.Bits()), true
}
