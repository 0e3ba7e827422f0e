package releaser

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// TestRelease holds release to Calico's block release: whole-block
// failure on a stale sequence number or handle, free addresses skipped,
// ordinals freed in ascending order to the tail, one sequence bump.
func TestRelease(t *testing.T) {
	cidr := netip.MustParsePrefix("10.244.0.0/30")
	addr := func(ord int) netip.Addr { ip, _ := calico.OrdinalToIP(cidr, ord); return ip }
	fresh := func(t *testing.T) *calico.Block {
		b, err := calico.NewBlock(cidr, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"h0", "h1", "h2"} {
			if _, err := b.Allocate(1, h, nil); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	seq := func(n uint64) *uint64 { return &n }
	for _, tc := range []struct {
		name     string
		opts     []releaseOpt
		conflict bool
		counts   map[string]int
		tail     []int
	}{
		{name: "two, out of order", opts: []releaseOpt{{ip: addr(2), handle: "h2", seq: seq(102)}, {ip: addr(0), handle: "h0", seq: seq(100)}},
			counts: map[string]int{"h0": 1, "h2": 1}, tail: []int{0, 2}},
		{name: "by address alone", opts: []releaseOpt{{ip: addr(1)}}, counts: map[string]int{"h1": 1}, tail: []int{1}},
		{name: "stale sequence number", opts: []releaseOpt{{ip: addr(0), handle: "h0", seq: seq(100)}, {ip: addr(1), handle: "h1", seq: seq(7)}}, conflict: true},
		{name: "stale handle", opts: []releaseOpt{{ip: addr(1), handle: "h0"}}, conflict: true},
		{name: "already free", opts: []releaseOpt{{ip: addr(3)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fresh(t)
			before, free := b.SequenceNumber, slices.Clone(b.Unallocated)
			counts, err := release(b, tc.opts)
			if tc.conflict != errors.Is(err, errConflict) || (!tc.conflict && err != nil) {
				t.Fatalf("release: %v, want conflict %t", err, tc.conflict)
			}
			if !maps.Equal(counts, tc.counts) {
				t.Errorf("counts %v, want %v", counts, tc.counts)
			}
			if len(tc.tail) == 0 {
				if b.SequenceNumber != before || !slices.Equal(b.Unallocated, free) {
					t.Errorf("block changed: sequence %d -> %d, free %v -> %v", before, b.SequenceNumber, free, b.Unallocated)
				}
				return
			}
			if b.SequenceNumber != before+1 {
				t.Errorf("sequence number %d, want %d", b.SequenceNumber, before+1)
			}
			if got := b.Unallocated[len(b.Unallocated)-len(tc.tail):]; !slices.Equal(got, tc.tail) {
				t.Errorf("free list %v, want it to end in %v", b.Unallocated, tc.tail)
			}
			for _, ord := range tc.tail {
				if _, ok := b.SequenceNumberForAllocation[strconv.Itoa(ord)]; ok || b.Allocations[ord] != nil {
					t.Errorf("ordinal %d still allocated or numbered", ord)
				}
			}
		})
	}
}
