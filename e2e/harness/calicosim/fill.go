package calicosim

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// Holder is one pod's address as calico-ipam's ADD assigns it: under
// the handle <network>.<container ID>, with the secondary attributes
// Calico 3.x records (node, timestamp, namespace, pod: call.attributes).
type Holder struct {
	Handle    string
	Secondary map[string]string
}

// Filled are the blocks affine to node that calico-ipam leaves once it
// has assigned one address to each holder in turn: consecutive blocks
// from first on, each claimed when the one before is full, each address
// the head of its block's free list. The Allocator makes the same blocks
// one request at a time; a large cluster is planted from these at once
// (SeedBlocks, SeedKubeBlocks). The caller leaves first's pool room.
func Filled(node string, first netip.Prefix, holders []Holder, at time.Time) ([]*calico.Block, error) {
	var blocks []*calico.Block
	next, room := first.Masked(), true
	for _, h := range holders {
		if len(blocks) == 0 || blocks[len(blocks)-1].FreeCount() == 0 {
			if !room {
				return nil, fmt.Errorf("the blocks of %s from %s on: no room after %d blocks", node, first, len(blocks))
			}
			b, err := calico.NewBlock(next, uint64(at.UnixNano()))
			if err != nil {
				return nil, err
			}
			b.ClaimFor(node, at)
			blocks = append(blocks, b)
			next, room = nextPrefix(next)
		}
		if _, err := blocks[len(blocks)-1].Allocate(1, h.Handle, h.Secondary); err != nil {
			return nil, fmt.Errorf("assigning %s on %s: %w", h.Handle, node, err)
		}
	}
	return blocks, nil
}

// handleDocs are the handle documents of blocks' allocations: each
// handle's count of addresses in each block, as calico-ipam keeps it.
func handleDocs(blocks []*calico.Block) (map[string]*calico.Handle, []string) {
	docs := map[string]*calico.Handle{}
	var order []string
	for _, b := range blocks {
		for ord := range b.Size() {
			a, ok := b.Attribute(ord)
			if !ok || a.Handle() == "" {
				continue
			}
			h := docs[a.Handle()]
			if h == nil {
				h = calico.NewHandle()
				docs[a.Handle()] = h
				order = append(order, a.Handle())
			}
			h.Add(b.CIDR, 1)
		}
	}
	return docs, order
}

// seedBatch is how many keys one planting transaction writes: each put
// is guarded (the key is new), and etcd allows 128 operations of each
// kind in a transaction.
const seedBatch = 100

// SeedBlocks writes blocks in etcd as calico-ipam's claims and
// assignments leave them: each block, its node's confirmed affinity, and
// the handle document of each handle it holds, in transactions of up to
// seedBatch new keys.
func SeedBlocks(ctx context.Context, cli *clientv3.Client, blocks []*calico.Block) error {
	var t txn
	put := func(key string, v any) error {
		t.guard(key, 0)
		t.put(key, v)
		if len(t.ops) < seedBatch {
			return nil
		}
		err := t.commit(ctx, cli)
		t = txn{}
		return err
	}
	docs, order := handleDocs(blocks)
	for _, id := range order {
		if err := put(calico.HandleKey(id), docs[id]); err != nil {
			return fmt.Errorf("seeding handle %s: %w", id, err)
		}
	}
	for _, b := range blocks {
		node, _ := b.AffinityNode()
		if err := put(calico.BlockKey(b.CIDR), b); err != nil {
			return fmt.Errorf("seeding block %s: %w", b.CIDR, err)
		}
		if err := put(calico.AffinityKey(node, b.CIDR), calico.ConfirmedAffinity()); err != nil {
			return fmt.Errorf("seeding the affinity of %s: %w", b.CIDR, err)
		}
	}
	if len(t.ops) == 0 {
		return nil
	}
	return t.commit(ctx, cli)
}

// SeedKubeBlocks is SeedBlocks on the Kubernetes datastore: an
// IPAMHandle for each handle, then each IPAMBlock and its confirmed
// BlockAffinity, created one by one with Calico's metadata, as
// calico-ipam's writes leave them.
func SeedKubeBlocks(ctx context.Context, dyn dynamic.Interface, blocks []*calico.Block) error {
	c := kubeClient{dyn: dyn}
	create := func(k kind, name string, labels map[string]string, spec any) error {
		o, err := newKubeObject(k, name, labels, spec)
		if err == nil {
			_, err = c.create(ctx, k, o)
		}
		if err != nil {
			return fmt.Errorf("seeding %s(%s): %w", k.name, name, err)
		}
		return nil
	}
	docs, order := handleDocs(blocks)
	for _, id := range order {
		if err := create(kindHandle, calico.HandleName(id), nil, calico.NewIPAMHandleSpec(id, docs[id])); err != nil {
			return err
		}
	}
	for _, b := range blocks {
		node, _ := b.AffinityNode()
		if err := create(kindBlock, calico.BlockName(b.CIDR), nil, calico.NewIPAMBlockSpec(b)); err != nil {
			return err
		}
		aff := calico.NewBlockAffinitySpec(node, b.CIDR, calico.ConfirmedAffinity())
		if err := create(kindAffinity, calico.AffinityName(node, b.CIDR), calico.AffinityLabels(node, b.CIDR), aff); err != nil {
			return err
		}
	}
	return nil
}
