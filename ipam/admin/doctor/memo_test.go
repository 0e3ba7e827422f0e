package doctor

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// blocks is a Kubernetes datastore's blocks as GETs read them, counted.
type blocks struct {
	datastore.Datastore // any other call panics: the check makes none
	held                map[netip.Prefix]*calico.Block
	gets                int
}

func (b *blocks) Block(_ context.Context, cidr netip.Prefix) (*datastore.Block, error) {
	b.gets++
	if blk := b.held[cidr]; blk != nil {
		return &datastore.Block{Block: blk}, nil
	}
	return nil, nil
}

// hold allocates addr in its /24 block (not Calico's default /26) under
// handle.
func (b *blocks) hold(t *testing.T, addr netip.Addr, handle string) {
	t.Helper()
	cidr := netip.PrefixFrom(addr, 24).Masked()
	blk := b.held[cidr]
	if blk == nil {
		blk = &calico.Block{CIDR: cidr, Allocations: make([]*int, 256)}
		b.held[cidr] = blk
	}
	ord, err := blk.Ordinal(addr)
	if err != nil {
		t.Fatal(err)
	}
	i := len(blk.Attributes)
	blk.Attributes = append(blk.Attributes, calico.Attribute{HandleID: &handle})
	blk.Allocations[ord] = &i
}

func memoRecord(cid, addr string, age time.Duration) *record.Record {
	return &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: cid, IfName: "eth0"},
		State: record.Committed, PodNamespace: "default", PodName: "web-" + cid, IPs: []string{addr + "/24"}, Updated: time.Now().Add(-age)}
}

// The watch's full checks keep a memo (issue 32): the handle of a record
// a check sampled is not read again, and a new record's block is read at
// the size the last one was found at, one GET, where without the memo
// every check walks the block candidates (13 GETs for a /24 on IPv4). The
// verdict is the same either way.
func TestMemoReadsOnlyWhatChanged(t *testing.T) {
	ds := &blocks{held: map[netip.Prefix]*calico.Block{}}
	ds.hold(t, netip.MustParseAddr("10.1.2.3"), "k8s-pod-network.a")
	ds.hold(t, netip.MustParseAddr("10.1.2.4"), "default.web-b") // Calico 2.x keyed it by pod name
	cfg := &config.Config{DelegateHandles: config.HandlesContainer}
	a, b := memoRecord("a", "10.1.2.3", time.Hour), memoRecord("b", "10.1.2.4", 0)
	candidates := len(calico.BlockCandidates(netip.MustParseAddr("10.1.2.3")))
	shared := &Memo{}
	for _, tc := range []struct {
		name     string
		memo     bool
		recs     []*record.Record
		gets     int
		byPodKey bool
	}{
		{"no memo: the candidates, in order", false, []*record.Record{a}, 1 + calicoSizeRank(24), false},
		{"no memo, again: the same walk", false, []*record.Record{a}, 1 + calicoSizeRank(24), false},
		{"the memo's first check walks as well", true, []*record.Record{a}, 1 + calicoSizeRank(24), false},
		{"the same latest record: no GET", true, []*record.Record{a}, 0, false},
		{"a new latest record: its block at the size found", true, []*record.Record{a, b}, 1, true},
		{"and then none", true, []*record.Record{a, b}, 0, true},
	} {
		memo := &Memo{}
		if tc.memo {
			memo = shared
		}
		memo.begin()
		ds.gets = 0
		problem := handleModeProblem(context.Background(), ds, cfg, tc.recs, memo)
		memo.end()
		if ds.gets != tc.gets || (problem != "") != tc.byPodKey {
			t.Errorf("%s: %d GETs (want %d of at most %d), problem %q (want one: %v)", tc.name, ds.gets, tc.gets, candidates, problem, tc.byPodKey)
		}
	}
}

// calicoSizeRank is how many candidates BlockCandidates puts before a
// block of bits on IPv4.
func calicoSizeRank(bits int) int {
	for i, p := range calico.BlockCandidates(netip.MustParseAddr("10.1.2.3")) {
		if p.Bits() == bits {
			return i
		}
	}
	return -1
}
