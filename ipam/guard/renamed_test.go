package guard_test

import (
	"context"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// Issue 41, item 2.4: a node renamed (or its stale nodename fixed) while
// its pod ran keeps the pod's record under the old name, where its DEL,
// under the new name, did not look: the DEL freed the address in Calico
// and the record fenced it for ever. The DEL now finds the record through
// the address index from its prevResult and releases it, when this
// machine wrote it; another host's record there is kept (a stale
// nodename: that host's pod may run), and without a prevResult nothing
// is read (gc --former-node remains). Kept, the index entry would fence
// the address the DEL freed.
func TestDelAfterARenameReleasesTheOldNamesRecord(t *testing.T) {
	tests := []struct {
		name      string
		host      string // the record's host; "" keeps this machine's
		prev      bool
		forgotten bool
	}{
		{name: "this machine's record", prev: true, forgotten: true},
		{name: "another host's record", host: "another-machine", prev: true},
		{name: "no prevResult"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "etcd")
			old := "old" + r.prefix[1:]
			r.node = old
			res := r.add("c1")
			if tt.host != "" {
				rec := r.record("c1")
				rec.Host = tt.host
				r.overwrite("c1", rec)
			}
			r.node = "new" + r.prefix[1:]
			stdin := r.conf()
			if tt.prev {
				stdin = withPrevResult(t, stdin, res)
			}
			if _, err := r.run("DEL", env("c1"), stdin); err != nil {
				t.Fatalf("DEL under the new name: %v", err)
			}
			r.node = old
			if left := r.record("c1") == nil; left != tt.forgotten {
				t.Fatalf("record under the old name forgotten = %v; want %v: %+v", left, tt.forgotten, r.record("c1"))
			}
			ips, _ := resultIPs(res)
			holder, err := r.store().(store.Cluster).HolderOf(context.Background(), "net1", ips[0])
			if err != nil || (holder == nil) != tt.forgotten {
				t.Fatalf("the address's index entry names %+v (%v); want it gone with the record: %v", holder, err, tt.forgotten)
			}
		})
	}
}
