// Package audit reads Calico's IPAM data and safe-ipam's records from etcd
// and finds what operators used to hunt for by hand: pod-name handles,
// addresses freed under a live record, addresses held twice, leaks,
// orphan records and inconsistent documents. Repair fixes only what the
// audit proves, with compare-and-swap writes.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
)

// pageSize bounds how many keys one read holds in memory at once.
const pageSize = 2000

// Snapshot is what the audit needs of Calico's IPAM data and safe-ipam's
// records, read at one etcd revision. It keeps summaries, not documents:
// repair re-reads every document it changes, so only the facts the
// findings need stay in memory.
type Snapshot struct {
	Revision    int64
	Blocks      map[netip.Prefix]*BlockSummary
	Allocations []Allocation
	// Handles holds each handle document's per-block counts as stored.
	Handles    map[string]json.RawMessage
	Affinities []AffinityDoc
	Records    []*record.Record
	// Undecodable lists Calico documents that did not decode, key: error.
	// One damaged document must not blind the audit to the rest.
	Undecodable map[string]string

	byHandle map[string]map[netip.Prefix]int
}

// BlockSummary is one block: who claims it and what is wrong with its
// allocations and free list.
type BlockSummary struct {
	CIDR     netip.Prefix
	Node     string // from the affinity "host:<node>"
	Problems []string
}

// Allocation is one allocated address and the attributes the findings use.
type Allocation struct {
	Addr      netip.Addr
	Block     netip.Prefix
	Handle    string
	Namespace string
	Pod       string
	Node      string    // the attribute's node, else the block's
	Type      string    // set by Calico for its own (tunnel) addresses
	Time      time.Time // the attribute's timestamp; zero when absent
}

// calicoTime is how Calico writes an attribute's timestamp.
const calicoTime = "2006-01-02 15:04:05.999999999 -0700 MST"

// AffinityDoc is a host affinity.
type AffinityDoc struct {
	Node string
	CIDR netip.Prefix
}

// Load reads everything under Calico's IPAM prefix and the records of
// network ("" for all) under recordsPrefix, at one revision.
func Load(ctx context.Context, cli *clientv3.Client, recordsPrefix, network string) (*Snapshot, error) {
	s := &Snapshot{Blocks: map[netip.Prefix]*BlockSummary{}, Handles: map[string]json.RawMessage{}}
	if err := scan(ctx, cli, calico.IPAMPrefix, &s.Revision, s.addCalico); err != nil {
		return nil, fmt.Errorf("reading Calico IPAM data: %w", err)
	}
	prefix := recordsPrefix + "/attachments/"
	if network != "" {
		prefix = etcdstore.Prefix(recordsPrefix, network)
	}
	if err := scan(ctx, cli, prefix, &s.Revision, s.addRecord); err != nil {
		return nil, fmt.Errorf("reading safe-ipam records: %w", err)
	}
	qs := quarantines{prefix: recordsPrefix + "/quarantine/", byHolder: map[string][]record.Quarantine{}}
	if err := scan(ctx, cli, qs.prefix, &s.Revision, qs.add); err != nil {
		return nil, fmt.Errorf("reading safe-ipam quarantines: %w", err)
	}
	for _, rec := range s.Records {
		rec.Quarantined = qs.byHolder[rec.Network+"/"+rec.Node+"/"+rec.ContainerID+"/"+rec.IfName]
	}
	return s, nil
}

// quarantines collects the quarantine entries by their holder,
// <network>/<node>/<containerID>/<ifname>.
type quarantines struct {
	prefix   string
	byHolder map[string][]record.Quarantine
}

func (q *quarantines) add(key string, value []byte, _ int64) error {
	network, rest, _ := strings.Cut(strings.TrimPrefix(key, q.prefix), "/")
	parts := strings.Split(strings.TrimPrefix(rest, "holder/"), "/")
	if !strings.HasPrefix(rest, "holder/") || len(parts) != 6 {
		return nil // the attachment-side key of the same quarantine
	}
	var entry record.Quarantine
	if err := json.Unmarshal(value, &entry); err != nil {
		return nil // a damaged entry names no address; the handle is judged on its own
	}
	holder := network + "/" + strings.Join(parts[:3], "/")
	q.byHolder[holder] = append(q.byHolder[holder], entry)
	return nil
}

// scan pages through a prefix at one revision (the first page's, shared
// by later scans) so the snapshot is consistent.
func scan(ctx context.Context, cli *clientv3.Client, prefix string, rev *int64, add func(key string, value []byte, modRev int64) error) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageSize)}
		if *rev != 0 {
			opts = append(opts, clientv3.WithRev(*rev))
		}
		resp, err := cli.Get(ctx, from, opts...)
		if err != nil {
			return err
		}
		if *rev == 0 {
			*rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := add(string(kv.Key), kv.Value, kv.ModRevision); err != nil {
				return fmt.Errorf("%s: %w", kv.Key, err)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (s *Snapshot) addCalico(key string, value []byte, _ int64) error {
	if err := s.addCalicoDoc(key, value); err != nil {
		if s.Undecodable == nil {
			s.Undecodable = map[string]string{}
		}
		s.Undecodable[key] = err.Error()
	}
	return nil
}

func (s *Snapshot) addCalicoDoc(key string, value []byte) error {
	switch {
	case strings.HasPrefix(key, calico.BlockPrefix):
		var b calico.Block
		if err := json.Unmarshal(value, &b); err != nil {
			return err
		}
		s.addBlock(&b)
	case strings.HasPrefix(key, calico.HandlePrefix):
		id, err := calico.ParseHandleKey(key)
		if err != nil {
			return err
		}
		var h struct {
			Block json.RawMessage `json:"block"`
		}
		if err := json.Unmarshal(value, &h); err != nil {
			return err
		}
		s.Handles[id] = h.Block
	case strings.HasPrefix(key, calico.HostPrefix):
		node, cidr, err := calico.ParseAffinityKey(key)
		if err != nil {
			return err
		}
		s.Affinities = append(s.Affinities, AffinityDoc{Node: node, CIDR: cidr})
	}
	return nil
}

func (s *Snapshot) addBlock(b *calico.Block) {
	node, _ := b.AffinityNode()
	s.Blocks[b.CIDR] = &BlockSummary{CIDR: b.CIDR, Node: node, Problems: partitionProblems(b)}
	for _, h := range b.Held() {
		attr := h.Attribute
		al := Allocation{Addr: h.IP, Block: b.CIDR, Handle: attr.Handle(), Node: node,
			Namespace: attr.Secondary["namespace"], Pod: attr.Secondary["pod"], Type: attr.Secondary["type"]}
		if n := attr.Secondary["node"]; n != "" {
			al.Node = n
		}
		if ts, err := time.Parse(calicoTime, attr.Secondary["timestamp"]); err == nil {
			al.Time = ts
		}
		s.Allocations = append(s.Allocations, al)
	}
}

// partitionProblems: every ordinal must be either allocated (to an
// existing attribute) or on the free list, exactly once.
func partitionProblems(b *calico.Block) []string {
	var problems []string
	seen := make([]int, len(b.Allocations))
	for ord, idx := range b.Allocations {
		if idx == nil {
			continue
		}
		seen[ord]++
		if *idx < 0 || *idx >= len(b.Attributes) {
			problems = append(problems, fmt.Sprintf("ordinal %d points at attribute %d of %d", ord, *idx, len(b.Attributes)))
		}
	}
	for _, ord := range b.Unallocated {
		if ord < 0 || ord >= len(seen) {
			problems = append(problems, fmt.Sprintf("free list holds ordinal %d outside the block", ord))
			continue
		}
		seen[ord]++
	}
	var bad []string
	for ord, n := range seen {
		if n != 1 {
			bad = append(bad, fmt.Sprintf("%d(x%d)", ord, n))
		}
	}
	if len(bad) > 0 {
		problems = append(problems, "allocations and unallocated do not partition the block; ordinals "+strings.Join(bad, ","))
	}
	return problems
}

// heldBy counts, per block, the addresses the snapshot saw under handle.
// The index is built on first use.
func (s *Snapshot) heldBy(handle string) map[netip.Prefix]int {
	if s.byHandle == nil {
		s.byHandle = map[string]map[netip.Prefix]int{}
		for _, al := range s.Allocations {
			if s.byHandle[al.Handle] == nil {
				s.byHandle[al.Handle] = map[netip.Prefix]int{}
			}
			s.byHandle[al.Handle][al.Block]++
		}
	}
	return s.byHandle[handle]
}

func (s *Snapshot) addRecord(key string, value []byte, modRev int64) error {
	rec, err := etcdstore.Decode(value, modRev) // repair compares it
	if err != nil {
		return err
	}
	rec.Result = nil // the audit never replays; 100k results would dominate memory
	s.Records = append(s.Records, rec)
	return nil
}
