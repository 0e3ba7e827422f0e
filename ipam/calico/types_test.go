package calico

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestJSONRoundTripIsByteExact(t *testing.T) {
	tests := []struct {
		name string
		data string
		into any
	}{
		{"block", briefBlock, &Block{}},
		{"handle", briefHandle, &Handle{}},
		{"affinity", briefAffinity, &Affinity{}},
		{"ippool", briefPool, &IPPool{}},
		{"node", briefNode, &Node{}},
		{"unclaimed block", `{"cidr":"10.0.0.0/30","affinity":null,"allocations":[null,0,null,null],"unallocated":[0,2,3],"attributes":[{"handle_id":null,"secondary":null}],"sequenceNumber":7,"sequenceNumberForAllocation":{"1":6},"deleted":false}`, &Block{}},
		{"disabled pool", `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"p"},"spec":{"cidr":"fd00:10:244::/48","blockSize":122,"disabled":true}}`, &IPPool{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec := json.NewDecoder(bytes.NewReader([]byte(tt.data)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(tt.into); err != nil {
				t.Fatalf("decoding: %v", err)
			}
			got, err := json.Marshal(tt.into)
			if err != nil {
				t.Fatalf("encoding: %v", err)
			}
			if string(got) != tt.data {
				t.Errorf("round trip changed the bytes\n got: %s\nwant: %s", got, tt.data)
			}
		})
	}
}

func TestConstructorsMatchBrief(t *testing.T) {
	pool := NewIPPool("default-ipv4-ippool", mustPrefix(t, "10.244.0.0/16"), 26)
	pool.Metadata.UID = "2c3a1d2e-0000-0000-0000-000000000001"
	pool.Metadata.CreationTimestamp = "2026-11-21T00:00:00Z"
	node := NewNode("node1")
	node.Metadata.UID = "2c3a1d2e-0000-0000-0000-000000000002"
	node.Metadata.CreationTimestamp = "2026-11-21T00:00:00Z"
	h := NewHandle()
	h.Add(mustPrefix(t, "10.244.166.128/26"), 1)
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"pool", pool, briefPool},
		{"node", node, briefNode},
		{"affinity", ConfirmedAffinity(), briefAffinity},
		{"handle", h, briefHandle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

func TestHandleCounts(t *testing.T) {
	cidr := mustPrefix(t, "10.244.166.128/26")
	other := mustPrefix(t, "10.244.0.0/26")
	h := NewHandle()
	h.Add(cidr, 2)
	h.Add(other, 1)
	if h.Total() != 3 {
		t.Fatalf("Total = %d, want 3", h.Total())
	}
	h.Remove(cidr, 2)
	if _, ok := h.Block[cidr.String()]; ok {
		t.Errorf("block with zero count kept: %v", h.Block)
	}
	h.Remove(other, 1)
	if !h.Empty() {
		t.Errorf("handle not empty: %v", h.Block)
	}
}

func TestIPPoolBlockSize(t *testing.T) {
	tests := []struct {
		cidr    string
		size    int
		want    int
		wantErr bool
	}{
		{"10.244.0.0/16", 26, 26, false},
		{"10.244.0.0/16", 0, DefaultBlockSizeV4, false},
		{"fd00:10:244::/48", 0, DefaultBlockSizeV6, false},
		{"fd00:10:244::/48", 122, 122, false},
		{"10.244.0.0/16", 12, 0, true},
		{"10.244.0.0/16", 33, 0, true},
		{"not-a-cidr", 26, 0, true},
	}
	for _, tt := range tests {
		p := IPPool{Metadata: ObjectMeta{Name: "p"}, Spec: IPPoolSpec{CIDR: tt.cidr, BlockSize: tt.size}}
		got, err := p.EffectiveBlockSize()
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s blockSize %d: got %d, %v; want %d, error %v", tt.cidr, tt.size, got, err, tt.want, tt.wantErr)
		}
	}
}
