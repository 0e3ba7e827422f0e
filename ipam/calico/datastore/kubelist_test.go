package datastore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
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

// A scan's list request asks for JSON pages at the list's point, and
// what the server answers decides its error: a continuation that
// expired (410) is named so, and an answer cut off on its way is not
// taken for a damaged document.
func TestListPages(t *testing.T) {
	blocks := `{"metadata":{"name":"10-244-0-0-26","resourceVersion":"5"},"spec":{"cidr":"10.244.0.0/26","allocations":[],"unallocated":[],"attributes":[]}}`
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		err    string
	}{
		{"two pages", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("continue") == "" {
				fmt.Fprintf(w, `{"items":[%s],"metadata":{"resourceVersion":"9","continue":"next"}}`, blocks)
				return
			}
			fmt.Fprint(w, `{"items":[],"metadata":{"resourceVersion":"9"}}`)
		}, ""},
		{"an expired continuation", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("continue") == "" {
				fmt.Fprint(w, `{"items":[],"metadata":{"resourceVersion":"9","continue":"old"}}`)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGone)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old"}`)
		}, "expired before its last page"},
		{"cut off", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			fmt.Fprintf(w, `{"items":[%s`, blocks)
		}, "was not read whole"},
		{"not a list", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"items":{}}`)
		}, "does not decode"},
		{"something after the list", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"items":[],"metadata":{"resourceVersion":"9"}} {}`)
		}, "does not decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if got := r.Header.Get("Accept"); got != "application/json" {
					t.Errorf("Accept %q, want JSON", got)
				}
				asked = append(asked, r.URL.Path+"?"+r.URL.Query().Encode())
				tt.answer(w, r)
			}))
			defer srv.Close()
			k, err := NewKubeForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			p, err := k.Scan(context.Background(), Visitor{
				Block:       func(b *calico.Block) { got = append(got, b.CIDR.String()) },
				Undecodable: func(key string, err error) { t.Errorf("undecodable %s: %v", key, err) },
			})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("scan: %v at %+v; want an error saying %q", err, p, tt.err)
				}
				return
			}
			if err != nil || p.ResourceVersion != "9" || strings.Join(got, " ") != "10.244.0.0/26" {
				t.Fatalf("scan: %v at %+v, %v", got, p, err)
			}
			want := []string{"/apis/crd.projectcalico.org/v1/ipamblocks?limit=2000", "/apis/crd.projectcalico.org/v1/ipamblocks?continue=next&limit=2000"}
			if strings.Join(asked, " ") != strings.Join(want, " ") {
				t.Errorf("asked %q, want %q", asked, want)
			}
		})
	}
}
