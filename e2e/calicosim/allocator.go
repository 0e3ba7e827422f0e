package calicosim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// ErrNoFreeIPs means the node's blocks are full and its pools have no
// unclaimed block. The simulator never borrows from other nodes' blocks.
var ErrNoFreeIPs = errors.New("no more free IPs")

const defaultMaxAttempts = 100

// Allocator assigns and releases addresses for one node in Calico's etcd
// layout. It is safe for concurrent use, also across processes: every
// write is a transaction guarded by the revisions of the keys it changes.
type Allocator struct {
	Client *clientv3.Client
	Node   string
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
	asg, err := retry(ctx, a.maxAttempts(), func() (Assignment, error) {
		return a.tryAssign(ctx, fam, pools, handle, secondary)
	})
	if err != nil {
		return Assignment{}, fmt.Errorf("assigning an %s address to handle %s: %w", fam, handle, err)
	}
	a.log().Debug("assigned", "ip", asg.IP, "block", asg.Block, "handle", handle)
	return asg, nil
}

// tryAssign makes one attempt; errConflict means re-read and retry.
func (a *Allocator) tryAssign(ctx context.Context, fam calico.Family, pools []calico.IPPool, handle string, secondary map[string]string) (Assignment, error) {
	blk, rev, err := a.affineBlockWithRoom(ctx, fam, pools)
	if err != nil {
		return Assignment{}, err
	}
	if blk == nil {
		if blk, rev, err = a.claimBlock(ctx, fam, pools); err != nil {
			return Assignment{}, err
		}
	}
	return a.allocateIn(ctx, blk, rev, handle, secondary)
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
func (a *Allocator) affineBlockWithRoom(ctx context.Context, fam calico.Family, pools []calico.IPPool) (*calico.Block, int64, error) {
	cidrs, err := a.affineBlocks(ctx, fam)
	if err != nil {
		return nil, 0, err
	}
	for _, cidr := range cidrs {
		if !inPools(cidr, pools) {
			continue
		}
		var blk calico.Block
		rev, err := calico.ReadJSON(ctx, a.Client, calico.BlockKey(cidr), &blk)
		if err != nil {
			return nil, 0, err
		}
		if node, ok := blk.AffinityNode(); rev == 0 || !ok || node != a.Node || blk.FreeCount() == 0 {
			continue
		}
		return &blk, rev, nil
	}
	return nil, 0, nil
}

// affineBlocks lists the blocks the node holds confirmed, ascending.
func (a *Allocator) affineBlocks(ctx context.Context, fam calico.Family) ([]netip.Prefix, error) {
	resp, err := a.Client.Get(ctx, calico.HostAffinityPrefix(a.Node, fam), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("listing affinities of %s: %w", a.Node, err)
	}
	var cidrs []netip.Prefix
	for _, kv := range resp.Kvs {
		_, cidr, err := calico.ParseAffinityKey(string(kv.Key))
		if err != nil {
			a.log().Warn("skipping affinity", "key", string(kv.Key), "error", err)
			continue
		}
		var aff calico.Affinity
		if err := json.Unmarshal(kv.Value, &aff); err != nil || aff.State != calico.AffinityConfirmed || aff.Deleted {
			continue
		}
		cidrs = append(cidrs, cidr)
	}
	slices.SortFunc(cidrs, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	return cidrs, nil
}

// claimBlock creates the first block of the pools that does not exist yet
// and the node's confirmed affinity to it, in one transaction.
func (a *Allocator) claimBlock(ctx context.Context, fam calico.Family, pools []calico.IPPool) (*calico.Block, int64, error) {
	existing, err := a.existingBlocks(ctx, fam)
	if err != nil {
		return nil, 0, err
	}
	cidr, ok := firstFreeBlock(pools, existing)
	if !ok {
		return nil, 0, fmt.Errorf("%w in pools %v for node %s", ErrNoFreeIPs, poolCIDRs(pools), a.Node)
	}
	now := a.now()
	blk, err := calico.NewBlock(cidr, uint64(now.UnixNano()))
	if err != nil {
		return nil, 0, err
	}
	blk.ClaimFor(a.Node, now)
	affKey := calico.AffinityKey(a.Node, cidr)
	// A stale affinity of ours may exist without its block; overwrite it.
	var stale calico.Affinity
	affRev, err := calico.ReadJSON(ctx, a.Client, affKey, &stale)
	if err != nil {
		return nil, 0, err
	}
	var t txn
	t.guard(calico.BlockKey(cidr), 0)
	t.guard(affKey, affRev)
	t.put(affKey, calico.ConfirmedAffinity())
	t.put(calico.BlockKey(cidr), blk)
	rev, err := t.commitRev(ctx, a.Client)
	if err != nil {
		return nil, 0, fmt.Errorf("claiming block %s: %w", cidr, err)
	}
	a.log().Debug("claimed block", "block", cidr, "node", a.Node)
	return blk, rev, nil
}

// existingBlocks lists every block of the family, whoever holds it.
func (a *Allocator) existingBlocks(ctx context.Context, fam calico.Family) ([]netip.Prefix, error) {
	resp, err := a.Client.Get(ctx, calico.BlockFamilyPrefix(fam), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("listing %s blocks: %w", fam, err)
	}
	out := make([]netip.Prefix, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if cidr, err := calico.ParseBlockKey(string(kv.Key)); err == nil {
			out = append(out, cidr)
		}
	}
	return out, nil
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

// allocateIn takes one address of blk (read at rev) for handle and counts
// it in the handle, block and handle in one transaction.
func (a *Allocator) allocateIn(ctx context.Context, blk *calico.Block, rev int64, handle string, secondary map[string]string) (Assignment, error) {
	h := calico.NewHandle()
	hKey := calico.HandleKey(handle)
	hRev, err := calico.ReadJSON(ctx, a.Client, hKey, h)
	if err != nil {
		return Assignment{}, err
	}
	ords, err := blk.Allocate(1, handle, secondary)
	if err != nil {
		return Assignment{}, err
	}
	h.Add(blk.CIDR, 1)
	var t txn
	t.guard(calico.BlockKey(blk.CIDR), rev)
	t.guard(hKey, hRev)
	t.put(calico.BlockKey(blk.CIDR), blk)
	t.put(hKey, h)
	if err := t.commit(ctx, a.Client); err != nil {
		return Assignment{}, err
	}
	ip, err := blk.IP(ords[0])
	if err != nil {
		return Assignment{}, err
	}
	return Assignment{IP: ip, Block: blk.CIDR, Handle: handle}, nil
}
