package calico

import (
	"net/netip"
	"slices"
	"testing"
)

func TestAllocateOrdinal(t *testing.T) {
	b, err := NewBlock(netip.MustParsePrefix("10.0.0.0/29"), 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AllocateOrdinal(5, "net.c1", map[string]string{"pod": "web-0"}); err != nil {
		t.Fatal(err)
	}
	if a, ok := b.Attribute(5); !ok || a.Handle() != "net.c1" {
		t.Fatalf("ordinal 5 = %+v, %v", a, ok)
	}
	if want := []int{0, 1, 2, 3, 4, 6, 7}; !slices.Equal(b.Unallocated, want) {
		t.Errorf("free list %v, want %v", b.Unallocated, want)
	}
	if b.SequenceNumber != 101 || b.SequenceNumberForAllocation["5"] != 100 {
		t.Errorf("sequence %d, for 5: %d", b.SequenceNumber, b.SequenceNumberForAllocation["5"])
	}
	for _, ord := range []int{5, 8, -1} {
		if err := b.AllocateOrdinal(ord, "x", nil); err == nil {
			t.Errorf("allocating ordinal %d again succeeded", ord)
		}
	}
}
