package detect_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/backends"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	admindetect "github.com/safe-ipam/safe-ipam/ipam/admin/detect"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

// Calico's allocations are read with their owners from its datastore
// (etcd here) in one scan of its blocks alone (a handle, which does not
// say who holds an address, is not read, even one that does not
// decode); a block document that does not decode fails
// the read (its allocations are unread: the listing is not whole, and
// gone-owner is unknown that round, never clean).
func TestCalicoAllocations(t *testing.T) {
	srv := etcdtest.Start(t)
	b := backends.Etcd(t, srv.Client())
	ctx := context.Background()
	p := netip.MustParsePrefix("10.244.0.0/26")
	blk, err := calico.NewBlock(p, 1000)
	if err != nil {
		t.Fatal(err)
	}
	blk.ClaimFor("n1", time.Now())
	if _, err := blk.Allocate(1, "k8s-pod-network.abc", map[string]string{"namespace": "default", "pod": "web-0", "node": "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Store.Write(ctx, datastore.Change{Blocks: []*datastore.Block{{Block: blk}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client().Put(ctx, calico.HandleKey("k8s-pod-network.unread"), "{not JSON"); err != nil {
		t.Fatal(err)
	}
	read := admindetect.CalicoAllocations(datastore.Settings{Type: datastore.Etcd, Endpoints: []string{srv.Endpoint()}})
	allocs, err := read(ctx)
	if err != nil || len(allocs) != 1 || allocs[0].Pod != "web-0" || allocs[0].Namespace != "default" || allocs[0].Node != "n1" || allocs[0].Handle != "k8s-pod-network.abc" {
		t.Fatalf("allocations %+v, %v", allocs, err)
	}
	b.Garble(t, netip.MustParsePrefix("10.244.1.0/26"))
	if allocs, err := read(ctx); err == nil {
		t.Fatalf("a block that does not decode: read %+v and no error", allocs)
	}
}
