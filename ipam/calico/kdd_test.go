package calico

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
)

type sampleObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

type sampleStep struct {
	Step    string         `json:"step"`
	Objects []sampleObject `json:"objects"`
}

func loadSamples(t *testing.T) []sampleStep {
	t.Helper()
	data, err := os.ReadFile(calicodata.Require(t, calicodata.KDDSamples))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Steps []sampleStep `json:"steps"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("decoding %s: %v", calicodata.KDDSamples, err)
	}
	if len(doc.Steps) != 2 {
		t.Fatalf("%s has %d steps, want 2", calicodata.KDDSamples, len(doc.Steps))
	}
	return doc.Steps
}

// jsonValue decodes data keeping numbers exact, so sequence numbers above
// 2^53 compare correctly.
func jsonValue(t *testing.T, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
	return v
}

func sameJSON(t *testing.T, got, want []byte) bool {
	t.Helper()
	return reflect.DeepEqual(jsonValue(t, got), jsonValue(t, want))
}

// roundTrip decodes a sample spec, converts it to the etcd model and back,
// and returns the re-encoded spec and the name the model gives the object.
type roundTrip func(t *testing.T, spec []byte) (name string, out []byte)

var roundTrips = map[string]roundTrip{
	KindIPAMBlock: func(t *testing.T, spec []byte) (string, []byte) {
		var s IPAMBlockSpec
		mustDecode(t, spec, &s)
		b, err := s.Block()
		if err != nil {
			t.Fatal(err)
		}
		return BlockName(b.CIDR), mustEncode(t, NewIPAMBlockSpec(b))
	},
	KindIPAMHandle: func(t *testing.T, spec []byte) (string, []byte) {
		var s IPAMHandleSpec
		mustDecode(t, spec, &s)
		return HandleName(s.HandleID), mustEncode(t, NewIPAMHandleSpec(s.HandleID, s.Handle()))
	},
	KindBlockAffinity: func(t *testing.T, spec []byte) (string, []byte) {
		var s BlockAffinitySpec
		mustDecode(t, spec, &s)
		node, cidr, a, err := s.Affinity()
		if err != nil {
			t.Fatal(err)
		}
		return AffinityName(node, cidr), mustEncode(t, NewBlockAffinitySpec(node, cidr, a))
	},
}

func mustDecode(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKDDSamplesRoundTrip(t *testing.T) {
	for _, step := range loadSamples(t) {
		for _, obj := range step.Objects {
			t.Run(obj.Kind+"/"+obj.Metadata.Name, func(t *testing.T) {
				if obj.APIVersion != KDDAPIVersion {
					t.Errorf("apiVersion %q, want %q", obj.APIVersion, KDDAPIVersion)
				}
				rt, ok := roundTrips[obj.Kind]
				if !ok {
					t.Fatalf("unexpected kind %q", obj.Kind)
				}
				name, out := rt(t, obj.Spec)
				if name != obj.Metadata.Name {
					t.Errorf("name from the spec %q, object is %q", name, obj.Metadata.Name)
				}
				if !sameJSON(t, out, obj.Spec) {
					t.Errorf("spec round trip through the model changed it:\n got %s\nwant %s", out, obj.Spec)
				}
			})
		}
	}
}

func TestKDDSamplesLabels(t *testing.T) {
	for _, step := range loadSamples(t) {
		for _, obj := range step.Objects {
			var wantLabels map[string]string
			if obj.Kind == KindBlockAffinity {
				var s BlockAffinitySpec
				mustDecode(t, obj.Spec, &s)
				node, cidr, _, err := s.Affinity()
				if err != nil {
					t.Fatal(err)
				}
				wantLabels = AffinityLabels(node, cidr)
			}
			if !maps.Equal(obj.Metadata.Labels, wantLabels) {
				t.Errorf("%s %s: labels %v, want %v", obj.Kind, obj.Metadata.Name, obj.Metadata.Labels, wantLabels)
			}
			want := map[string]string{AnnotationMetadata: MetadataAnnotation(wantLabels)}
			if !maps.Equal(obj.Metadata.Annotations, want) {
				t.Errorf("%s %s: annotations %v, want %v", obj.Kind, obj.Metadata.Name, obj.Metadata.Annotations, want)
			}
		}
	}
}

// TestKDDSamplesHandleCounts checks, per step, that the handles count
// exactly what the blocks attribute to them, keyed by original handle ID.
func TestKDDSamplesHandleCounts(t *testing.T) {
	for _, step := range loadSamples(t) {
		fromBlocks, fromHandles := map[string]map[string]int{}, map[string]map[string]int{}
		for _, obj := range step.Objects {
			switch obj.Kind {
			case KindIPAMBlock:
				var s IPAMBlockSpec
				mustDecode(t, obj.Spec, &s)
				b, err := s.Block()
				if err != nil {
					t.Fatal(err)
				}
				for h, n := range b.HandleCounts() {
					if fromBlocks[h] == nil {
						fromBlocks[h] = map[string]int{}
					}
					fromBlocks[h][s.CIDR] = n
				}
			case KindIPAMHandle:
				var s IPAMHandleSpec
				mustDecode(t, obj.Spec, &s)
				fromHandles[s.HandleID] = s.Handle().Block
			}
		}
		if len(fromBlocks) == 0 || !reflect.DeepEqual(fromBlocks, fromHandles) {
			t.Errorf("%.40s: blocks hold %v, handles say %v", step.Step, fromBlocks, fromHandles)
		}
	}
}

func TestKDDBlockSpecToEtcd(t *testing.T) {
	blk := loadSamples(t)[1].Objects[0]
	if blk.Kind != KindIPAMBlock {
		t.Fatalf("first final object is a %s", blk.Kind)
	}
	var s IPAMBlockSpec
	mustDecode(t, blk.Spec, &s)
	b, err := s.Block()
	if err != nil {
		t.Fatal(err)
	}
	etcd := string(mustEncode(t, b))
	for _, want := range []string{`"affinity_claim_time":"2026-11-21T10:00:00Z"`, `"sequenceNumber":1795300000000000005`, `"unallocated":[4,`} {
		if !strings.Contains(etcd, want) {
			t.Errorf("etcd JSON lacks %s: %s", want, etcd)
		}
	}
	for _, unwanted := range []string{"affinityClaimTime", "strictAffinity"} {
		if strings.Contains(etcd, unwanted) {
			t.Errorf("etcd JSON has KDD field %s: %s", unwanted, etcd)
		}
	}
	if got := b.HandleCounts(); got["default.web-2"] != 2 || got["k8s-pod-network.bbb222"] != 1 || len(got) != 2 {
		t.Errorf("handle counts %v", got)
	}
}

func TestMarshalSpecKeeping(t *testing.T) {
	tests := []struct {
		name, raw, want string
		spec            any
	}{
		{"unknown key kept", `{"handleID":"a","block":{},"deleted":false,"future":{"x":1}}`,
			`{"handleID":"A","block":{"10.0.0.0/26":1},"deleted":false,"future":{"x":1}}`,
			IPAMHandleSpec{HandleID: "A", Block: map[string]int{"10.0.0.0/26": 1}}},
		{"modelled keys take the new value", `{"state":"pending","node":"n","cidr":"10.0.0.0/26","deleted":"false"}`,
			`{"state":"confirmed","node":"n","cidr":"10.0.0.0/26","type":"host","deleted":"true"}`,
			NewBlockAffinitySpec("n", netip.MustParsePrefix("10.0.0.0/26"), Affinity{State: AffinityConfirmed, Deleted: true})},
		{"unreadable raw", `not json`, `{}`, struct{}{}},
		{"extra after an empty object", `{"a":1}`, `{"a":1}`, struct{}{}},
	}
	for _, tt := range tests {
		got, err := MarshalSpecKeeping([]byte(tt.raw), tt.spec)
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: got %s, %v; want %s", tt.name, got, err, tt.want)
		}
	}
}

func TestKDDNames(t *testing.T) {
	long := strings.Repeat("n", 250)
	tests := []struct {
		name, got, want string
	}{
		{"v4 block", BlockName(netip.MustParsePrefix("10.244.166.128/26")), "10-244-166-128-26"},
		{"v6 block", BlockName(netip.MustParsePrefix("fd00::/122")), "fd00---122"},
		{"unmasked block", BlockName(netip.MustParsePrefix("10.244.166.130/26")), "10-244-166-128-26"},
		{"affinity", AffinityName("node1", netip.MustParsePrefix("10.244.166.128/26")), "node1-10-244-166-128-26"},
		{"handle case", HandleName("k8s-pod-network.FFF666"), "k8s-pod-network.fff666"},
		{"handle dots kept", HandleName("default.web-2"), "default.web-2"},
		{"hostname hash", HostnameHash("node1"), "7DS2CCNJGGLTHBDQLLFO6SX24SY2YDDEG3W2VN556FA2W4DLLV5A"},
		{"ip version 6", AffinityLabels("n", netip.MustParsePrefix("fd00::/122"))[LabelIPVersion], "6"},
		{"long affinity", AffinityName(long, netip.MustParsePrefix("10.244.166.128/26")),
			long[:222] + "-10-244-166-128-26-" + "HASH"},
	}
	for _, tt := range tests {
		want := tt.want
		if strings.HasSuffix(want, "HASH") {
			want = want[:len(want)-4] + tt.got[len(tt.got)-affinityHashLen:]
			if len(tt.got) != 252 {
				t.Errorf("%s: length %d, want 252", tt.name, len(tt.got))
			}
		}
		if tt.got != want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, want)
		}
	}
}

// TestAffinityNameLimit checks the shortening starts exactly where the
// full name would reach 253 characters, and keeps names unique.
func TestAffinityNameLimit(t *testing.T) {
	cidr := netip.MustParsePrefix("10.244.166.128/26") // block name: 17 characters
	fits := strings.Repeat("a", 252-18)
	if got := AffinityName(fits, cidr); got != fits+"-10-244-166-128-26" {
		t.Errorf("252-character name was changed: %q", got)
	}
	a, b := AffinityName(fits+"xa", cidr), AffinityName(fits+"xb", cidr)
	if a == b || len(a) != 252 || ValidateObjectName(a) != nil {
		t.Errorf("long names %q and %q: not distinct valid 252-character names", a, b)
	}
}

func TestValidateObjectName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"k8s-pod-network.aaa111", true},
		{"default.web-2", true},
		{"k8s_pod_network.hhh888", false},
		{"K8s.a", false},
		{"-a.b", false},
		{"a.b-", false},
		{"a..b", false},
		{strings.Repeat("a", 253), true},
		{strings.Repeat("a", 254), false},
	}
	for _, tt := range tests {
		if err := ValidateObjectName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidateObjectName(%.20q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestMetadataAnnotation(t *testing.T) {
	if got := MetadataAnnotation(nil); got != "{}" {
		t.Errorf("no labels: %s", got)
	}
	got := MetadataAnnotation(map[string]string{"b": "2", "a": "1"})
	if got != `{"labels":{"a":"1","b":"2"}}` {
		t.Errorf("labels: %s", got)
	}
}
