package datastore

import (
	"bytes"
	"encoding/json"
	"testing"
)

// handleFields.decode gives what encoding/json gives, for the form Calico
// writes and for anything else.
func FuzzHandleFields(f *testing.F) {
	for _, s := range []string{
		`{"block":{"10.244.0.0/26":1},"deleted":false}`, `{"block":{"10.244.0.0/26":2,"fd00::/122":1},"deleted":true}`,
		`{"block":{}}`, `{"deleted":false}`, `{}`, ` { "block" : { "a" : 10 } , "deleted" : false } `, `{"block":{"a":01}}`,
		`{"block":{"a":1.5}}`, `{"block":{"a":-1}}`, `{"block":{"a":1e3}}`, `{"block":{"a":1234567890}}`, `{"block":null}`,
		`{"Block":{"a":1}}`, `{"block":{"a":1},"block":{"b":2}}`, `{"deleted":null}`, `{"block":{"a":1},"other":1}`,
		`{"block":{"a":1}}x`, `{"block":{"a":1},}`, `null`, `[]`, ``, `{"block":{"\u0061":1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow handleFields
		ferr := fast.decode(data)
		serr := json.Unmarshal(data, &slow)
		if (ferr == nil) != (serr == nil) {
			t.Fatalf("%q: decode says %v; encoding/json %v", data, ferr, serr)
		}
		if ferr == nil && (!bytes.Equal(fast.Block, slow.Block) || (fast.Block == nil) != (slow.Block == nil) || fast.Deleted != slow.Deleted) {
			t.Fatalf("%q: decode gives %s %v; encoding/json %s %v", data, fast.Block, fast.Deleted, slow.Block, slow.Deleted)
		}
	})
}
