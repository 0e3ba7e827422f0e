package calicosim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// Snapshot is Calico's IPAM state at one etcd revision (State) or read
// from the Kubernetes datastore (KubeState, Revision 0), for tests to
// check what calico-ipam would see.
type Snapshot struct {
	Revision   int64
	Blocks     []BlockState // ordered by address, IPv4 first
	Handles    map[string]calico.Handle
	Affinities []AffinityState
}

// BlockState is one block with its addresses spelled out.
type BlockState struct {
	Block     calico.Block
	Allocated []Allocation // by ordinal
	Free      []netip.Addr // in the order they will be handed out
}

// Allocation is one allocated address and who holds it.
type Allocation struct {
	IP        netip.Addr
	Block     netip.Prefix
	Ordinal   int
	Handle    string
	Secondary map[string]string
}

// AffinityState is one host's claim on a block.
type AffinityState struct {
	Node     string
	Block    netip.Prefix
	Affinity calico.Affinity
}

// State reads every IPAM key in one consistent read.
func State(ctx context.Context, cli *clientv3.Client) (*Snapshot, error) {
	resp, err := cli.Get(ctx, calico.IPAMPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading Calico IPAM state: %w", err)
	}
	s := &Snapshot{Revision: resp.Header.Revision, Handles: map[string]calico.Handle{}}
	for _, kv := range resp.Kvs {
		if err := s.add(string(kv.Key), kv.Value); err != nil {
			return nil, err
		}
	}
	sortBlocks(s.Blocks)
	return s, nil
}

// sortBlocks orders blocks by address, IPv4 first.
func sortBlocks(blocks []BlockState) {
	slices.SortFunc(blocks, func(x, y BlockState) int { return x.Block.CIDR.Addr().Compare(y.Block.CIDR.Addr()) })
}

func (s *Snapshot) add(key string, value []byte) error {
	switch {
	case strings.HasPrefix(key, calico.BlockPrefix):
		var b calico.Block
		if err := json.Unmarshal(value, &b); err != nil {
			return fmt.Errorf("decoding block %s: %w", key, err)
		}
		bs, err := describeBlock(b)
		if err != nil {
			return fmt.Errorf("block %s: %w", key, err)
		}
		s.Blocks = append(s.Blocks, bs)
	case strings.HasPrefix(key, calico.HandlePrefix):
		var h calico.Handle
		if err := json.Unmarshal(value, &h); err != nil {
			return fmt.Errorf("decoding handle %s: %w", key, err)
		}
		id, _ := calico.ParseHandleKey(key)
		s.Handles[id] = h
	case strings.HasPrefix(key, calico.HostPrefix):
		node, cidr, err := calico.ParseAffinityKey(key)
		if err != nil {
			return err
		}
		var aff calico.Affinity
		if err := json.Unmarshal(value, &aff); err != nil {
			return fmt.Errorf("decoding affinity %s: %w", key, err)
		}
		s.Affinities = append(s.Affinities, AffinityState{Node: node, Block: cidr, Affinity: aff})
	}
	return nil
}

func describeBlock(b calico.Block) (BlockState, error) {
	bs := BlockState{Block: b}
	for _, h := range b.Held() {
		bs.Allocated = append(bs.Allocated, Allocation{IP: h.IP, Block: b.CIDR, Ordinal: h.Ordinal, Handle: h.Attribute.Handle(), Secondary: h.Attribute.Secondary})
	}
	for _, ord := range b.Unallocated {
		ip, err := b.IP(ord)
		if err != nil {
			return BlockState{}, err
		}
		bs.Free = append(bs.Free, ip)
	}
	return bs, nil
}

// Allocations lists every allocated address, by block then ordinal.
func (s *Snapshot) Allocations() []Allocation {
	var out []Allocation
	for _, b := range s.Blocks {
		out = append(out, b.Allocated...)
	}
	return out
}

// AllocationsOf lists the addresses the blocks attribute to handle.
func (s *Snapshot) AllocationsOf(handle string) []Allocation {
	var out []Allocation
	for _, a := range s.Allocations() {
		if a.Handle == handle {
			out = append(out, a)
		}
	}
	return out
}

// Lookup finds who holds ip.
func (s *Snapshot) Lookup(ip netip.Addr) (Allocation, bool) {
	for _, a := range s.Allocations() {
		if a.IP == ip {
			return a, true
		}
	}
	return Allocation{}, false
}

// Block returns the state of the block cidr.
func (s *Snapshot) Block(cidr netip.Prefix) (BlockState, bool) {
	for _, b := range s.Blocks {
		if b.Block.CIDR == cidr {
			return b, true
		}
	}
	return BlockState{}, false
}

// HandleCount is the number of addresses the handle document records,
// 0 when there is no handle.
func (s *Snapshot) HandleCount(handle string) int {
	h, ok := s.Handles[handle]
	if !ok {
		return 0
	}
	return h.Total()
}

// Inconsistencies lists disagreements between handle documents and the
// blocks' attributes; Calico's own writes never leave any.
func (s *Snapshot) Inconsistencies() []string {
	fromBlocks := map[string]map[string]int{}
	for _, b := range s.Blocks {
		for h, n := range b.Block.HandleCounts() {
			if fromBlocks[h] == nil {
				fromBlocks[h] = map[string]int{}
			}
			fromBlocks[h][b.Block.CIDR.String()] = n
		}
	}
	var out []string
	for h, counts := range fromBlocks {
		if doc, ok := s.Handles[h]; !ok || !equalCounts(doc.Block, counts) {
			out = append(out, fmt.Sprintf("handle %s: blocks hold %v, handle document says %v", h, counts, doc.Block))
		}
	}
	for h, doc := range s.Handles {
		if _, ok := fromBlocks[h]; !ok {
			out = append(out, fmt.Sprintf("handle %s: document says %v, blocks hold nothing", h, doc.Block))
		}
	}
	slices.Sort(out)
	return out
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
