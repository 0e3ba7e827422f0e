package record

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// Decode's common form gives what encoding/json gives, and everything
// else is encoding/json's own answer.
func FuzzDecode(f *testing.F) {
	at := time.Date(2026, 11, 26, 14, 0, 0, 123456789, time.UTC)
	for _, r := range []Record{
		{Attachment: Attachment{Network: "k8s-pod-network", ContainerID: "abc", IfName: "eth0"}, Node: "node1", Handle: "k8s-pod-network.abc",
			State: Committed, IPs: []string{"10.0.0.1/26"}, Created: at, Updated: at, Host: "node1", PodNamespace: "ns", PodName: "web-0", PodUID: "u-1",
			Result: []byte(`{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.1/26"}]}`)},
		{Attachment: Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}, Handle: "n.c", State: Pending, Created: at},
		{Attachment: Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}, Result: []byte(`{"cniVersion":"1.0.0"}`), Owner: &Owner{PID: 1, Start: 2, Boot: "b"}},
		{Attachment: Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}, Quarantined: []Quarantine{{Attachment: Attachment{Network: "n", ContainerID: "d", IfName: "eth0"}, IPs: []string{"10.0.0.2/26"}}}},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{`{}`, `{"ips":[]}`, `{"ips":null}`, `{"network":"a","network":"b"}`, `{"Network":"a"}`, `{"network":"é"}`,
		`{"network":"a\"b"}`, `{"created":"2026-11-26T14:00:00Z"}`, `{"created":"yesterday"}`, `{"created":null}`, ` { "ips" : [ "a" , "b" ] } `,
		`{"network":"a",}`, `{"result":"e30="}`, `{"result":null}`, `{"result":""}`, `{"result":"e30"}`, `{"result":"!!!!"}`, `{"result":"e3\u0030="}`, `{"result":[]}`, `{"network":"a"}x`, `{"network":1}`, `{"unknown":"x"}`, `[]`, `null`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow Record
		if !decodeCommon(data, &fast) {
			return
		}
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("the common form took %q, which encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: the common form gives %#v; encoding/json %#v", data, fast, slow)
		}
	})
}

// The records safe-ipam writes are in the common form: without that the
// shortcut saves nothing.
func TestDecodeTakesWhatSafeIPAMWrites(t *testing.T) {
	at := time.Date(2026, 11, 26, 14, 0, 0, 0, time.UTC)
	r := Record{Attachment: Attachment{Network: "k8s-pod-network", ContainerID: "abc", IfName: "eth0"}, Node: "node1", Handle: "k8s-pod-network.abc",
		State: Committed, IPs: []string{"10.0.0.1/26", "fd00::1/122"}, Created: at, Updated: at.Add(time.Second), Host: "node1", PodNamespace: "ns", PodName: "web-0",
		PodUID: "0b5d7e4e-1c2a-4c8e-9a51-2f6d3c1b7a90", Result: []byte(`{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.1/26"}],"routes":[{"dst":"10.0.0.0/26"}],"dns":{}}`)}
	b, _ := json.Marshal(r)
	var got Record
	if !decodeCommon(b, &got) || !reflect.DeepEqual(got, r) {
		t.Errorf("decodeCommon(%s) = %#v; want %#v", b, got, r)
	}
	if err := Decode([]byte(`{"network":"n","owner":{"pid":1},"result":"e30="}`), &got); err != nil || string(got.Result) != "{}" || got.Network != "n" || got.Owner == nil {
		t.Errorf("Decode of a record outside the common form: %#v, %v", got, err)
	}
}
