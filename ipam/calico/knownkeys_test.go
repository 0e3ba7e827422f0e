package calico

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// onlyKnownKeys, the shortcut past decoding each attribute into a map,
// answers yes only when that decoding finds no unknown key; and yes for
// the attributes Calico writes, or it saves nothing.
func FuzzOnlyKnownKeys(f *testing.F) {
	for _, s := range []string{
		`{"handle_id":"k8s-pod-network.abc","secondary":{"namespace":"ns","node":"n1","pod":"p","timestamp":"2026-01-02 03:04:05.1 +0000 UTC"}}`,
		`{"handle_id":null,"secondary":null}`,
		`{"handle_id":"a","secondary":{"type":"ipipTunnelAddress","node":"n"}}`,
		`{}`, ` { "handle_id" : "a" , "secondary" : { "a" : [1, {"b": "}"}] } } `,
		`{"HANDLE_ID":"a"}`, `{"handle_id":"a","releasedAt":"2026-01-02T03:04:05Z"}`,
		`{"handle_id":"c","secondary":null,"alternateOwnerAttrs":{"pod":"r"}}`,
		`{"handle_\u0069d":"a"}`, `{"handle_id":"a\"b","x":1}`, `{"ſecondary":{}}`, `{"handle_id":1e3,"y":true}`,
		`null`, `[]`, `{"handle_id":"a"}x`, `{"handle_id":"a",}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		known := []string{"handle_id", "secondary"}
		var all map[string]json.RawMessage
		if !onlyKnownKeys(data, known) || !json.Valid(data) {
			return
		}
		if err := json.Unmarshal(data, &all); err != nil {
			t.Fatalf("onlyKnownKeys(%s) = true, but it is no JSON object: %v", data, err)
		}
		for k := range all {
			if k != "handle_id" && k != "secondary" && !isFold(k, known) {
				t.Errorf("onlyKnownKeys(%s) = true, but it holds %q", data, k)
			}
		}
	})
}

func isFold(k string, known []string) bool {
	return slices.ContainsFunc(known, func(n string) bool { return strings.EqualFold(k, n) })
}

func TestOnlyKnownKeysOfCalicosAttributes(t *testing.T) {
	for _, tc := range []struct {
		data string
		want bool
	}{
		{`{"handle_id":"k8s-pod-network.abc","secondary":{"namespace":"ns","node":"n1","pod":"p","timestamp":"2026-01-02 03:04:05.1 +0000 UTC"}}`, true},
		{`{"handle_id":null,"secondary":null}`, true},
		{`{"handle_id":"ipip-tunnel-addr-n","secondary":{"node":"n","type":"ipipTunnelAddress"}}`, true},
		{`{}`, true},
		{` { "handle_id" : "a" , "secondary" : { "a" : [1, {"b": "}"}] } } `, true},
		{`{"Handle_Id":"a"}`, true},
		{`{"handle_id":"a","releasedAt":"2026-01-02T03:04:05Z"}`, false},
		{`{"handle_id":"c","secondary":null,"alternateOwnerAttrs":{"pod":"r"}}`, false},
		{`{"handle_\u0069d":"a"}`, false},
		{`{"handle_id":"a\"},\"x\":{","secondary":null}`, true},
		{`null`, false},
		{`{"handle_id":"a"} {}`, false},
	} {
		if got := onlyKnownKeys([]byte(tc.data), []string{"handle_id", "secondary"}); got != tc.want {
			t.Errorf("onlyKnownKeys(%s) = %v; want %v", tc.data, got, tc.want)
		}
	}
}
