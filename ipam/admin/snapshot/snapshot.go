// Package snapshot reads Calico's IPAM data (from etcd or the Kubernetes
// API, through package datastore) and safe-ipam's records into one
// consistent view where the datastores allow it: what the audit judges,
// what repair plans from, and where adopt finds the handle Calico holds a
// running pod's addresses under. A Session opens both stores where the
// flags say, reads them, and keeps them open for repair's writes.
package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Snapshot is what the audit needs of Calico's IPAM data and safe-ipam's
// records, read as one consistent view where the datastores allow it. It
// keeps summaries, not documents: repair re-reads every document it
// changes, so only the facts the findings need stay in memory.
type Snapshot struct {
	// Revision is the etcd revision of the scan (0 on Kubernetes).
	Revision int64
	// ResourceVersion is the Kubernetes lists' resourceVersion ("" on etcd).
	ResourceVersion string
	Blocks          map[netip.Prefix]*BlockSummary
	Allocations     Allocations
	Affinities      []AffinityDoc
	Records         []*record.Record
	// RecordsNode, when set, is the only node whose records were read (a
	// file store holds one node's): no judgment that needs records is made
	// about another node's allocations.
	RecordsNode string
	// RecordsShared says the records' store holds more than one machine's
	// records (etcd), read for one node or all.
	RecordsShared bool
	// Marks are the allocations the records' store keeps quarantined for
	// holders it cannot read (StoreRecords.Marks).
	Marks []RemoteMark
	// Undecodable lists Calico documents that did not decode, key: error.
	// One damaged document must not blind the audit to the rest.
	Undecodable map[string]string

	handles    handles
	handleDocs int
	names      map[string]string
	byHandle   map[string]map[netip.Prefix]int
	// mu guards the tables the scan and the records' reading share
	// (handles, names) while they run side by side.
	mu sync.Mutex
}

// BlockSummary is one block: who claims it and what is wrong with its
// allocations and free list.
type BlockSummary struct {
	CIDR     netip.Prefix
	Node     string // from the affinity "host:<node>"
	Problems []string
}

// Allocation is one allocated address and the attributes the findings
// use. An audit holds a million: its block and time are kept small.
type Allocation struct {
	Addr      netip.Addr
	block     *BlockSummary
	Handle    string
	Namespace string
	Pod       string
	Node      string // the attribute's node, else the block's
	at        int64  // the attribute's timestamp in Unix nanoseconds, 0 for none or a rare one
	// rare holds what few allocations carry, out of the common struct.
	rare *rareAttrs
}

// Block is the block that holds the address.
func (a *Allocation) Block() netip.Prefix {
	if a.block == nil {
		return netip.Prefix{}
	}
	return a.block.CIDR
}

// Time is the attribute's timestamp; zero when absent.
func (a *Allocation) Time() time.Time {
	switch {
	case a.at != 0:
		return time.Unix(0, a.at)
	case a.rare != nil:
		return a.rare.time
	}
	return time.Time{}
}

// setTime keeps t in Unix nanoseconds when they say it exactly: not for
// the zero time (none), the Unix epoch itself (0 means none), or a year
// they cannot hold, which are kept as they are.
func (a *Allocation) setTime(t time.Time) {
	switch y := t.Year(); {
	case t.IsZero():
	case y > 1678 && y < 2262 && t.UnixNano() != 0:
		a.at = t.UnixNano()
	default:
		if a.rare == nil {
			a.rare = &rareAttrs{}
		}
		a.rare.time = t
	}
}

type rareAttrs struct {
	// noOwnerNode: Calico's owner attributes name no node (Calico 2.x).
	noOwnerNode bool
	kind        string
	alternate   map[string]string
	time        time.Time // a timestamp outside what Allocation.at holds
}

// OwnerNode is the node Calico's owner attributes name, "" when they
// name none: Node is then the block's affinity, which is not the
// allocation's node (a pod on another node may borrow from the block).
func (a *Allocation) OwnerNode() string {
	if a.rare != nil && a.rare.noOwnerNode {
		return ""
	}
	return a.Node
}

// Type is set by Calico for its own (tunnel) addresses.
func (a *Allocation) Type() string {
	if a.rare == nil {
		return ""
	}
	return a.rare.kind
}

// Alternate is a KubeVirt VM allocation's alternate owner attributes (a
// live-migration target pod); nil when none.
func (a *Allocation) Alternate() map[string]string {
	if a.rare == nil {
		return nil
	}
	return a.rare.alternate
}

// calicoTime is how Calico writes an attribute's timestamp.
const calicoTime = "2006-01-02 15:04:05.999999999 -0700 MST"

// AffinityDoc is a host affinity.
type AffinityDoc struct {
	Node string
	CIDR netip.Prefix
}

// Load reads Calico's IPAM data from ds and the records of network (""
// for all, where recs can list all) from recs, at the scan's point when
// recs can read at it. Where the scan says its point at its start (etcd),
// the records are read beside it: the two readings, and etcd's serving
// of them, overlap.
func Load(ctx context.Context, ds datastore.Datastore, recs Records, network string) (*Snapshot, error) {
	s := newSnapshot()
	v := s.visitor()
	var beside chan loaded // the records, when read beside the scan
	rctx, cancelRecords := context.WithCancel(ctx)
	defer cancelRecords()
	if recs != nil {
		v.Read = func(p datastore.Point) {
			beside = make(chan loaded, 1)
			go func() {
				r, err := recs.Load(rctx, network, p, s.share)
				beside <- loaded{r, err}
			}()
		}
	}
	p, err := ds.Scan(ctx, v)
	if err != nil {
		if beside != nil { // stop the records' reading before the caller closes the stores
			cancelRecords()
			<-beside
		}
		return nil, err
	}
	s.Revision, s.ResourceVersion = p.Revision, p.ResourceVersion
	if recs == nil {
		return s, nil
	}
	var r loaded
	if beside != nil {
		r = <-beside
	} else {
		r.recs, r.err = recs.Load(ctx, network, p, s.share)
	}
	if r.err != nil {
		return nil, r.err
	}
	s.Records, s.RecordsNode, s.RecordsShared = r.recs, recs.Node(), recs.Shared()
	if m, ok := recs.(interface {
		Marks(context.Context, string) ([]RemoteMark, error)
	}); ok {
		// Fail closed: an allocation a mark keeps, unread, would look
		// like a leak.
		if s.Marks, err = m.Marks(ctx, network); err != nil {
			return nil, err
		}
	}
	s.names = nil
	return s, nil
}

// LoadAllocations reads Calico's blocks alone and returns their
// allocations and who they name: no handle, affinity or record, which a
// reader of who holds each address does not need, and whose reading
// would be most of the scan's cost (a handle per pod). It is no
// Snapshot: the audit would take the handles it did not read for
// missing. A block that does not decode fails it: its allocations are
// unread, the listing is not whole.
func LoadAllocations(ctx context.Context, ds datastore.Datastore) (Allocations, error) {
	s := newSnapshot()
	v := s.visitor()
	v.Handle, v.Affinity = nil, nil
	if _, err := ds.Scan(ctx, v); err != nil {
		return Allocations{}, err
	}
	if n := len(s.Undecodable); n > 0 {
		return Allocations{}, fmt.Errorf("%d of Calico's blocks do not decode (safe-ipam audit names them)", n)
	}
	return s.Allocations, nil
}

func newSnapshot() *Snapshot {
	return &Snapshot{Blocks: map[netip.Prefix]*BlockSummary{}, handles: handles{index: map[string]int32{}}, names: map[string]string{}}
}

// loaded is what Records.Load returned.
type loaded struct {
	recs []*record.Record
	err  error
}

func (s *Snapshot) visitor() datastore.Visitor {
	return datastore.Visitor{
		Block: s.addBlock,
		Handle: func(id string, counts json.RawMessage, v datastore.Version) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.handles.add(id, counts, v, s.Blocks)
			s.handleDocs++
		},
		Affinity: func(node string, cidr netip.Prefix) {
			s.Affinities = append(s.Affinities, AffinityDoc{Node: node, CIDR: cidr})
		},
		Undecodable: func(key string, err error) {
			if s.Undecodable == nil {
				s.Undecodable = map[string]string{}
			}
			s.Undecodable[key] = err.Error()
		},
	}
}

func (s *Snapshot) addBlock(b *calico.Block) {
	s.mu.Lock()
	defer s.mu.Unlock()
	node, _ := b.AffinityNode()
	summary := &BlockSummary{CIDR: b.CIDR, Node: node, Problems: partitionProblems(b)}
	s.Blocks[b.CIDR] = summary
	for _, h := range b.Held() {
		attr := h.Attribute
		handle, _ := s.handles.intern(attr.Handle())
		al := Allocation{Addr: h.IP, block: summary, Handle: handle, Node: s.name(node),
			Namespace: s.name(attr.Secondary["namespace"]), Pod: attr.Secondary["pod"]}
		if kind, alt := attr.Secondary["type"], attr.Alternate(); kind != "" || alt != nil {
			al.rare = &rareAttrs{kind: kind, alternate: alt}
		}
		if n := attr.Secondary["node"]; n != "" {
			al.Node = s.name(n)
		} else {
			if al.rare == nil {
				al.rare = &rareAttrs{}
			}
			al.rare.noOwnerNode = true
		}
		if ts, err := time.Parse(calicoTime, attr.Secondary["timestamp"]); err == nil {
			al.setTime(ts)
		}
		s.Allocations.append(al)
	}
}

// name returns the stored copy of a node's or namespace's name: a few
// names, each repeated by thousands of allocations and records.
func (s *Snapshot) name(n string) string {
	if c, ok := s.names[n]; ok {
		return c
	}
	s.names[n] = n
	return n
}

// share makes rec's strings the ones the snapshot already holds: its
// handle the allocations', its container ID part of that handle, its
// network, interface, node, namespace and host names the shared copies.
func (s *Snapshot) share(rec *record.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec.Result = nil // the audit never replays; 100k results would dominate memory
	// Interned, not only looked up: read beside the scan, a record may
	// come before the allocation that names its handle.
	rec.Handle, _ = s.handles.intern(rec.Handle)
	if id, ok := strings.CutPrefix(rec.Handle, rec.Network+"."); ok && id == rec.ContainerID {
		rec.ContainerID = id
	}
	rec.Network, rec.IfName, rec.Node = s.name(rec.Network), s.name(rec.IfName), s.name(rec.Node)
	rec.PodNamespace, rec.State, rec.Host = s.name(rec.PodNamespace), record.State(s.name(string(rec.State))), s.name(rec.Host)
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

// HeldBy counts, per block, the addresses the snapshot saw under handle.
// The index is built on first use.
func (s *Snapshot) HeldBy(handle string) map[netip.Prefix]int {
	if s.byHandle == nil {
		s.byHandle = map[string]map[netip.Prefix]int{}
		for _, al := range s.Allocations.All() {
			if s.byHandle[al.Handle] == nil {
				s.byHandle[al.Handle] = map[netip.Prefix]int{}
			}
			s.byHandle[al.Handle][al.Block()]++
		}
	}
	return s.byHandle[handle]
}
