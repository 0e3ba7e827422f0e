package calico

import (
	"encoding/json"
	"maps"
	"testing"
)

// decodeCommonAttribute gives what encoding/json gives, into empty fields
// and into fields that already hold something, whenever it takes data.
func FuzzDecodeCommonAttribute(f *testing.F) {
	for _, s := range []string{
		`{"handle_id":"k8s-pod-network.abc","secondary":{"namespace":"ns","node":"node1","pod":"web-0","timestamp":"2026-11-26 14:00:00.1 +0000 UTC"}}`,
		`{"handle_id":null,"secondary":null}`, `{"handle_id":"ipip-tunnel-addr-node1","secondary":{"node":"node1","type":"ipipTunnelAddress"}}`,
		`{}`, ` { "secondary" : { } , "handle_id" : "h" } `, `{"handle_id":"a","handle_id":"b"}`, `{"Handle_ID":"a"}`,
		`{"secondary":{"a":"1","a":"2"}}`, `{"secondary":{"a":null}}`, `{"secondary":{"a":1}}`, `{"handle_id":"\u0061"}`,
		`{"handle_id":"é"}`, `{"releasedAt":"x"}`, `{"handle_id":"a",}`, `{"handle_id":"a"}x`, `null`, `[]`, `{"secondary":[]}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, prefilled := range []bool{false, true} {
			// Each its own handle: encoding/json writes through one there.
			fastStart, slowStart := "before", "before"
			var fh, sh *string
			var sec map[string]string
			if prefilled {
				fh, sh, sec = &fastStart, &slowStart, map[string]string{"namespace": "old", "kept": "yes"}
			}
			fast := attributeFields{HandleID: fh, Secondary: maps.Clone(sec)}
			if !decodeCommonAttribute(data, &fast.HandleID, &fast.Secondary) {
				return
			}
			slow := attributeFields{HandleID: sh, Secondary: maps.Clone(sec)}
			if err := json.Unmarshal(data, &slow); err != nil {
				t.Fatalf("the common form took %q, which encoding/json refuses: %v", data, err)
			}
			if (fast.HandleID == nil) != (slow.HandleID == nil) || fast.HandleID != nil && *fast.HandleID != *slow.HandleID ||
				(fast.Secondary == nil) != (slow.Secondary == nil) || !maps.Equal(fast.Secondary, slow.Secondary) {
				t.Fatalf("%q (prefilled %v): the common form gives %v %v; encoding/json %v %v", data, prefilled, fast.HandleID, fast.Secondary, slow.HandleID, slow.Secondary)
			}
			if fastStart != slowStart || (fast.HandleID == fh) != (slow.HandleID == sh) {
				t.Fatalf("%q: the handle already there: the common form left %q (same pointer %v); encoding/json %q (%v)",
					data, fastStart, fast.HandleID == fh, slowStart, slow.HandleID == sh)
			}
		}
	})
}

// What Calico writes is in the common form: without that the shortcut
// saves nothing.
func TestCalicoAttributesAreCommon(t *testing.T) {
	b, err := NewBlock(mustPrefix(t, "10.0.0.0/26"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Allocate(1, "k8s-pod-network.abc", map[string]string{"namespace": "ns", "pod": "web-0", "node": "node1", "timestamp": "2026-11-26 14:00:00 +0000 UTC"}); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(b.Attributes[0])
	if err != nil {
		t.Fatal(err)
	}
	var a Attribute
	if !decodeCommonAttribute(data, &a.HandleID, &a.Secondary) || a.Handle() != "k8s-pod-network.abc" || a.Secondary["pod"] != "web-0" {
		t.Errorf("decodeCommonAttribute(%s) did not take it: %+v", data, a)
	}
}
