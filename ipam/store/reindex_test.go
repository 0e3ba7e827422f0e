package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 31, item 7: a live-migrating VM's source and target hold one
// address under the VM's handle, the target with the index entry. Reindex
// (install, every watch start) took the source's for a duplicate; it is
// one holder.
func TestReindexKnowsAVMsSharedEntry(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"file": func(t *testing.T) store.Store {
			s, err := filestore.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"etcd": func(t *testing.T) store.Store {
			return etcdstore.NewWithClient(etcdtest.Start(t).Client(), "/reindex", "node1", 5*time.Second)
		},
	}
	for kind, open := range stores {
		t.Run(kind, func(t *testing.T) {
			ctx, st := context.Background(), open(t)
			vm := func(cid string, with *record.Record) *record.Record {
				rec := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"}, Node: "node1",
					PodNamespace: "default", PodName: "virt-launcher-vm1-" + cid, Handle: "net1.vmi.default.vm1", State: record.Committed,
					IPs: []string{"10.0.0.5/32"}, Created: time.Now(), Updated: time.Now()}
				if with != nil {
					rec.SharedWith = &record.Peer{Attachment: with.Attachment, Node: with.Node}
				}
				out, err := st.Commit(ctx, nil, rec)
				if err != nil {
					t.Fatalf("committing %s: %v", cid, err)
				}
				return out
			}
			vm("dst", vm("src", nil))
			if n, held, err := store.Reindex(ctx, st, "net1"); err != nil || len(held) != 0 {
				t.Fatalf("Reindex: %d indexed, held %v, %v; want no duplicate", n, held, err)
			}
		})
	}
}
