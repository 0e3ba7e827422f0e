package datastore

import (
	"strings"
	"testing"
)

func TestDecodeListReadsItemsAsTheyCome(t *testing.T) {
	tests := []struct {
		name, in      string
		names         string
		rv, cont, err string
	}{
		{"metadata after the items", `{"apiVersion":"v1","items":[{"metadata":{"name":"a","resourceVersion":"7"},"spec":{"x":1}},{"metadata":{"name":"b"}}],"kind":"List","metadata":{"resourceVersion":"9","continue":"tok"}}`, "a b", "9", "tok", ""},
		{"metadata first", `{"metadata":{"resourceVersion":"9"},"items":[]}`, "", "9", "", ""},
		{"no items", `{"metadata":{"resourceVersion":"9"},"items":null}`, "", "9", "", ""},
		{"cut short", `{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"}}`, "a", "", "", "EOF"},
		{"items not a list", `{"items":{}}`, "", "", "", "want an array"},
		{"not an object", `[]`, "", "", "", "want {"},
		{"an item that is not an object", `{"items":[3]}`, "", "", "", "items"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			meta, err := decodeList(strings.NewReader(tt.in), func(o *object) { names = append(names, o.Metadata.Name) })
			if got := strings.Join(names, " "); got != tt.names {
				t.Errorf("items %q, want %q", got, tt.names)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil || meta.ResourceVersion != tt.rv || meta.Continue != tt.cont {
				t.Errorf("metadata %+v, %v; want %s, %q", meta, err, tt.rv, tt.cont)
			}
		})
	}
}
