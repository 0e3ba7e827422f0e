package calicosim

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/etcdread"
)

// etcdStore keeps IPAM data in etcd (datastore etcdv3). Each commit is one
// transaction guarded by the revisions of every key it changes, so a
// block and its handle always change together.
type etcdStore struct {
	cli *clientv3.Client
	log *slog.Logger
}

// checkNode ignores the namespace: on etcd calico-ipam does not look it
// up.
func (s etcdStore) checkNode(ctx context.Context, node, _ string) error {
	return CheckNode(ctx, s.cli, node)
}

func (s etcdStore) ipPools(ctx context.Context) ([]calico.IPPool, error) {
	return ReadIPPools(ctx, s.cli)
}

func (s etcdStore) affineBlocks(ctx context.Context, node string, fam calico.Family) ([]netip.Prefix, error) {
	resp, err := s.cli.Get(ctx, calico.HostAffinityPrefix(node, fam), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("listing affinities of %s: %w", node, err)
	}
	var cidrs []netip.Prefix
	for _, kv := range resp.Kvs {
		_, cidr, err := calico.ParseAffinityKey(string(kv.Key))
		if err != nil {
			s.log.Warn("skipping affinity", "key", string(kv.Key), "error", err)
			continue
		}
		var aff calico.Affinity
		if err := json.Unmarshal(kv.Value, &aff); err != nil || aff.State != calico.AffinityConfirmed || aff.Deleted {
			continue
		}
		cidrs = append(cidrs, cidr)
	}
	sortPrefixes(cidrs)
	return cidrs, nil
}

func sortPrefixes(cidrs []netip.Prefix) {
	slices.SortFunc(cidrs, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
}

func (s etcdStore) blocks(ctx context.Context, fam calico.Family) ([]netip.Prefix, error) {
	resp, err := s.cli.Get(ctx, calico.BlockFamilyPrefix(fam), clientv3.WithPrefix(), clientv3.WithKeysOnly())
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

func (s etcdStore) readBlock(ctx context.Context, cidr netip.Prefix) (*blockRef, error) {
	var blk calico.Block
	rev, err := etcdread.ReadJSON(ctx, s.cli, calico.BlockKey(cidr), &blk)
	if err != nil || rev == 0 {
		return nil, err
	}
	return &blockRef{block: &blk, rev: rev}, nil
}

// claim writes the block and the confirmed affinity in one transaction.
// A stale affinity of the node may exist without its block; it is
// overwritten.
func (s etcdStore) claim(ctx context.Context, node string, blk *calico.Block) (*blockRef, error) {
	affKey := calico.AffinityKey(node, blk.CIDR)
	var stale calico.Affinity
	affRev, err := etcdread.ReadJSON(ctx, s.cli, affKey, &stale)
	if err != nil {
		return nil, err
	}
	var t txn
	t.guard(calico.BlockKey(blk.CIDR), 0)
	t.guard(affKey, affRev)
	t.put(affKey, calico.ConfirmedAffinity())
	t.put(calico.BlockKey(blk.CIDR), blk)
	rev, err := t.commitRev(ctx, s.cli)
	if err != nil {
		return nil, err
	}
	return &blockRef{block: blk, rev: rev}, nil
}

func (s etcdStore) commitAllocation(ctx context.Context, ref *blockRef, handle string) error {
	h, err := s.readHandle(ctx, handle)
	if err != nil {
		return err
	}
	if h.handle == nil {
		h.handle = calico.NewHandle()
	}
	h.handle.Add(ref.block.CIDR, 1)
	var t txn
	t.guard(calico.BlockKey(ref.block.CIDR), ref.rev)
	t.guard(calico.HandleKey(handle), h.rev)
	t.put(calico.BlockKey(ref.block.CIDR), ref.block)
	t.put(calico.HandleKey(handle), h.handle)
	return t.commit(ctx, s.cli)
}

func (s etcdStore) readHandle(ctx context.Context, handle string) (*handleRef, error) {
	h := calico.NewHandle()
	rev, err := etcdread.ReadJSON(ctx, s.cli, calico.HandleKey(handle), h)
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		h = nil
	}
	return &handleRef{id: handle, handle: h, rev: rev}, nil
}

func (s etcdStore) commitRelease(ctx context.Context, h *handleRef, changed []*blockRef, update func(*calico.Handle)) error {
	var t txn
	hKey := calico.HandleKey(h.id)
	t.guard(hKey, h.rev)
	for _, ref := range changed {
		t.guard(calico.BlockKey(ref.block.CIDR), ref.rev)
		t.put(calico.BlockKey(ref.block.CIDR), ref.block)
	}
	if h.handle != nil {
		if update(h.handle); h.handle.Empty() {
			t.delete(hKey)
		} else {
			t.put(hKey, h.handle)
		}
	}
	return t.commit(ctx, s.cli)
}
