package calico

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// DecodeBlock gives what encoding/json gives into a zero Block, for the
// form Calico writes and for anything else.
func FuzzDecodeBlock(f *testing.F) {
	b, err := NewBlock(netip.MustParsePrefix("10.0.0.0/29"), 1700000000000000000)
	if err != nil {
		f.Fatal(err)
	}
	b.ClaimFor("node1", time.Date(2026, 11, 26, 14, 0, 0, 0, time.UTC))
	if _, err := b.Allocate(2, "k8s-pod-network.abc", map[string]string{"namespace": "ns", "pod": "web-0", "node": "node1", "timestamp": "2026-11-26 14:00:00 +0000 UTC"}); err != nil {
		f.Fatal(err)
	}
	calicoForm, err := json.Marshal(b)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(calicoForm)
	for _, s := range []string{
		`{"cidr":"10.0.0.0/30","affinity":null,"strictAffinity":false,"allocations":[null,0,null,1],"unallocated":[0,2],"attributes":[{"handle_id":"h","secondary":null},{"handle_id":null,"secondary":{"node":"n"}}],"deleted":false,"sequenceNumber":18446744073709551615,"sequenceNumberForAllocation":{"1":3,"3":4}}`,
		`{"allocations":[],"unallocated":[],"attributes":[],"sequenceNumberForAllocation":{}}`, `{"allocations":null,"unallocated":null,"attributes":null,"sequenceNumberForAllocation":null}`,
		`{"sequenceNumber":18446744073709551616}`, `{"sequenceNumber":-1}`, `{"sequenceNumber":1.0}`, `{"sequenceNumber":01}`, `{"allocations":[-1]}`, `{"allocations":[2147483648]}`,
		`{"attributes":[null]}`, `{"attributes":[{"handle_id":"h","releasedAt":"x"}]}`, `{"cidr":""}`, `{"cidr":"x"}`, `{"cidr":null}`, `{"CIDR":"10.0.0.0/30"}`,
		`{"affinity_claim_time":"2026-11-26T14:00:00Z"}`, `{"affinity_claim_time":null}`, `{"affinity_claim_time":"yesterday"}`, `{"strictAffinity":null}`,
		`{"deleted":true,"deleted":false}`, `{"other":1}`, `{}`, `null`, `[]`, ``, `{"cidr":"10.0.0.0/30"}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow Block
		ferr := DecodeBlock(data, &fast)
		serr := json.Unmarshal(data, &slow)
		if (ferr == nil) != (serr == nil) {
			t.Fatalf("%q: DecodeBlock says %v; encoding/json %v", data, ferr, serr)
		}
		if ferr == nil && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: DecodeBlock gives %+v; encoding/json %+v", data, fast, slow)
		}
	})
}

// What Calico writes is in the common form: without that the shortcut
// saves nothing.
func TestCalicoBlocksAreCommon(t *testing.T) {
	b, err := NewBlock(netip.MustParsePrefix("10.0.0.0/29"), 1)
	if err != nil {
		t.Fatal(err)
	}
	b.ClaimFor("node1", time.Now())
	if _, err := b.Allocate(1, "k8s-pod-network.abc", map[string]string{"namespace": "ns", "pod": "web-0"}); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var c Block
	if !decodeCommonBlock(data, &c) || c.CIDR != b.CIDR || len(c.Attributes) != 1 || c.Attributes[0].Handle() != "k8s-pod-network.abc" {
		t.Errorf("decodeCommonBlock(%s) did not take it: %+v", data, c)
	}
}
