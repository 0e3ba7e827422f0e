package calico

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestOrdinalIPConversion(t *testing.T) {
	tests := []struct {
		cidr string
		ord  int
		ip   string
	}{
		{"10.244.166.128/26", 0, "10.244.166.128"},
		{"10.244.166.128/26", 2, "10.244.166.130"},
		{"10.244.166.128/26", 63, "10.244.166.191"},
		{"10.0.255.0/20", 300, "10.0.241.44"}, // masked base 10.0.240.0, carries into the third byte
		{"fd00:10:244::/122", 0, "fd00:10:244::"},
		{"fd00:10:244::/122", 63, "fd00:10:244::3f"},
		{"fd00:10:244::ffc0/122", 63, "fd00:10:244::ffff"},
	}
	for _, tt := range tests {
		cidr := mustPrefix(t, tt.cidr)
		ip, err := OrdinalToIP(cidr, tt.ord)
		if err != nil || ip.String() != tt.ip {
			t.Errorf("OrdinalToIP(%s, %d) = %v, %v; want %s", tt.cidr, tt.ord, ip, err, tt.ip)
			continue
		}
		ord, err := IPToOrdinal(cidr, ip)
		if err != nil || ord != tt.ord {
			t.Errorf("IPToOrdinal(%s, %s) = %d, %v; want %d", tt.cidr, ip, ord, err, tt.ord)
		}
	}
}

func TestOrdinalIPErrors(t *testing.T) {
	cidr := mustPrefix(t, "10.244.166.128/26")
	for _, ord := range []int{-1, 64} {
		if _, err := OrdinalToIP(cidr, ord); err == nil {
			t.Errorf("ordinal %d accepted", ord)
		}
	}
	for _, ip := range []string{"10.244.166.127", "10.244.166.192", "fd00::1"} {
		if _, err := IPToOrdinal(cidr, netip.MustParseAddr(ip)); err == nil {
			t.Errorf("%s accepted as part of %s", ip, cidr)
		}
	}
	if _, err := NewBlock(mustPrefix(t, "10.0.0.0/8"), 0); err == nil {
		t.Error("a /8 block was accepted")
	}
}

func podAttrs(pod, ts string) map[string]string {
	return map[string]string{"namespace": "default", "node": "node1", "pod": pod, "timestamp": ts}
}

// TestAllocateReleaseReproducesBrief replays what calico-ipam did to the
// BRIEF block and expects the same bytes.
func TestAllocateReleaseReproducesBrief(t *testing.T) {
	const first = 1795285794169824569
	b, err := NewBlock(mustPrefix(t, "10.244.166.128/26"), first)
	if err != nil {
		t.Fatal(err)
	}
	b.ClaimFor("node1", time.Date(2026, 11, 21, 18, 29, 54, 120000000, time.UTC))
	steps := []struct {
		handle, pod, ts string
		want            int
	}{
		{"k8s-pod-network.0f1e2d3c4b5a", "web-0", "2026-11-21 18:29:54.161129131 +0000 UTC", 0},
		{"k8s-pod-network.9a8b7c6d5e4f", "web-1", "2026-11-21 18:29:54.193792229 +0000 UTC", 1},
		{"k8s-pod-network.5e5e5e5e5e5e", "web-2", "2026-11-21 18:29:55.000000001 +0000 UTC", 2},
	}
	for _, s := range steps {
		ords, err := b.Allocate(1, s.handle, podAttrs(s.pod, s.ts))
		if err != nil || !slices.Equal(ords, []int{s.want}) {
			t.Fatalf("allocating for %s: %v, %v; want [%d]", s.pod, ords, err, s.want)
		}
	}
	if got := b.ReleaseHandle("k8s-pod-network.5e5e5e5e5e5e"); !slices.Equal(got, []int{2}) {
		t.Fatalf("ReleaseHandle released %v, want [2]", got)
	}
	got, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != briefBlock {
		t.Errorf("block differs from BRIEF\n got: %s\nwant: %s", got, briefBlock)
	}
}

func TestAttributesAreSharedAndCompacted(t *testing.T) {
	b, _ := NewBlock(mustPrefix(t, "10.0.0.0/29"), 100)
	mustAlloc(t, b, 2, "a", nil)                 // 0,1 -> attr 0
	mustAlloc(t, b, 1, "b", map[string]string{}) // 2 -> attr 1
	mustAlloc(t, b, 1, "a", nil)                 // 3 -> attr 0 again (identical)
	mustAlloc(t, b, 1, "c", nil)                 // 4 -> attr 2
	if len(b.Attributes) != 3 {
		t.Fatalf("attributes = %d, want 3 (identical attribute reused)", len(b.Attributes))
	}
	if got := b.ReleaseHandle("a"); !slices.Equal(got, []int{0, 1, 3}) {
		t.Fatalf("released %v, want [0 1 3]", got)
	}
	wantAlloc := []*int{nil, nil, ptr(0), nil, ptr(1), nil, nil, nil}
	if !equalAllocations(b.Allocations, wantAlloc) {
		t.Errorf("allocations = %v, want %v", deref(b.Allocations), deref(wantAlloc))
	}
	if len(b.Attributes) != 2 || b.Attributes[0].Handle() != "b" || b.Attributes[1].Handle() != "c" {
		t.Errorf("attributes = %+v, want [b c]", b.Attributes)
	}
	if want := []int{5, 6, 7, 0, 1, 3}; !slices.Equal(b.Unallocated, want) {
		t.Errorf("unallocated = %v, want %v", b.Unallocated, want)
	}
	if b.SequenceNumber != 100+5+3 {
		t.Errorf("sequenceNumber = %d, want %d", b.SequenceNumber, 108)
	}
	if want := map[string]uint64{"2": 102, "4": 104}; !mapsEqual(b.SequenceNumberForAllocation, want) {
		t.Errorf("sequenceNumberForAllocation = %v, want %v", b.SequenceNumberForAllocation, want)
	}
	if got := b.HandleCounts(); len(got) != 2 || got["b"] != 1 || got["c"] != 1 {
		t.Errorf("HandleCounts = %v", got)
	}
}

// TestReleasedAddressIsReusedLast checks the free-list order that makes
// a stale DEL dangerous only after the block cycles.
func TestReleasedAddressIsReusedLast(t *testing.T) {
	b, _ := NewBlock(mustPrefix(t, "10.0.0.0/30"), 1)
	mustAlloc(t, b, 1, "a", nil)
	if err := b.Release(0); err != nil {
		t.Fatal(err)
	}
	var order []int
	for range 4 {
		ords := mustAlloc(t, b, 1, "x", nil)
		order = append(order, ords...)
	}
	if want := []int{1, 2, 3, 0}; !slices.Equal(order, want) {
		t.Errorf("allocation order = %v, want %v", order, want)
	}
	if _, err := b.Allocate(1, "x", nil); !errors.Is(err, ErrBlockFull) {
		t.Errorf("full block: got %v, want ErrBlockFull", err)
	}
}

func TestAllocateAndReleaseAreAllOrNothing(t *testing.T) {
	b, _ := NewBlock(mustPrefix(t, "10.0.0.0/30"), 1)
	mustAlloc(t, b, 3, "a", nil)
	before, _ := json.Marshal(b)
	tests := []struct {
		name string
		op   func() error
	}{
		{"allocate more than free", func() error { _, err := b.Allocate(2, "b", nil); return err }},
		{"release a free ordinal", func() error { return b.Release(0, 3) }},
		{"release twice", func() error { return b.Release(1, 1) }},
		{"release out of range", func() error { return b.Release(4) }},
	}
	for _, tt := range tests {
		if err := tt.op(); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
		if after, _ := json.Marshal(b); string(after) != string(before) {
			t.Errorf("%s changed the block\nbefore: %s\n after: %s", tt.name, before, after)
		}
	}
}

func TestClaimAndAffinity(t *testing.T) {
	b, _ := NewBlock(mustPrefix(t, "10.0.0.7/30"), 1)
	if b.CIDR.String() != "10.0.0.4/30" {
		t.Errorf("CIDR not masked: %s", b.CIDR)
	}
	if _, ok := b.AffinityNode(); ok {
		t.Error("new block has an affinity")
	}
	b.ClaimFor("node1", time.Date(2026, 1, 2, 3, 4, 5, 999, time.FixedZone("x", 3600)))
	if n, ok := b.AffinityNode(); !ok || n != "node1" {
		t.Errorf("AffinityNode = %q, %v", n, ok)
	}
	got, _ := json.Marshal(b)
	want := `{"cidr":"10.0.0.4/30","affinity":"host:node1","affinity_claim_time":"2026-01-02T02:04:05Z","allocations":[null,null,null,null],"unallocated":[0,1,2,3],"attributes":[],"sequenceNumber":1,"sequenceNumberForAllocation":{},"deleted":false}`
	if string(got) != want {
		t.Errorf("\n got: %s\nwant: %s", got, want)
	}
}

func mustAlloc(t *testing.T, b *Block, n int, h string, sec map[string]string) []int {
	t.Helper()
	ords, err := b.Allocate(n, h, sec)
	if err != nil {
		t.Fatal(err)
	}
	return ords
}

func ptr(i int) *int { return &i }

func deref(a []*int) []any {
	out := make([]any, len(a))
	for i, p := range a {
		if p != nil {
			out[i] = *p
		}
	}
	return out
}

func equalAllocations(a, b []*int) bool {
	return slices.EqualFunc(a, b, func(x, y *int) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) })
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
