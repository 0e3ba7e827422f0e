package calico

import (
	"encoding/json"
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

func TestMarshalKeepingUnknownFields(t *testing.T) {
	raw := []byte(`{"cidr":"10.0.0.0/30","affinity":null,"allocations":[null,null,null,null],"unallocated":[0,1,2,3],"attributes":[],"sequenceNumber":1,"sequenceNumberForAllocation":{},"deleted":false,"strictAffinity":true,"zz":{"a":1}}`)
	var b Block
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Allocate(1, "h", nil); err != nil {
		t.Fatal(err)
	}
	out, err := MarshalKeeping(raw, &b)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("not JSON: %s", out)
	}
	if string(got["strictAffinity"]) != "true" || string(got["zz"]) != `{"a":1}` || string(got["unallocated"]) != "[1,2,3]" {
		t.Errorf("rewritten block %s", out)
	}
	plain, _ := json.Marshal(&b)
	if known, _ := MarshalKeeping(plain, &b); string(known) != string(plain) {
		t.Errorf("a block with no unknown fields changed: %s", known)
	}
}
