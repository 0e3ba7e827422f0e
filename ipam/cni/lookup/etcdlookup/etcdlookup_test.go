package etcdlookup_test

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/cni/lookup/etcdlookup"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// The CNI binary reads Calico's etcd for a Node, an address's handle and
// a handle's addresses, on one connection made at the first read.
func TestReadsCalicosEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	pools := []calico.IPPool{calico.NewIPPool("pool", netip.MustParsePrefix("10.96.0.0/26"), 26)}
	alloc := &calicosim.Allocator{Client: srv.Client(), Node: "node1"}
	var want []netip.Addr
	for range 2 {
		asg, err := alloc.Assign(ctx, pools, "default.web-0", map[string]string{"namespace": "default", "pod": "web-0", "node": "node1"})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, asg.Prefix().Addr())
	}
	if _, err := srv.Client().Put(ctx, calico.NodeKey("node1"), `{"kind":"Node"}`); err != nil {
		t.Fatal(err)
	}
	warned := map[string]string{}
	warn := func(transport, why string) { warned[transport] = why }
	c := etcdlookup.New(config.CalicoSettings{DatastoreType: config.DatastoreEtcd, EtcdEndpoints: srv.Endpoint()}, warn)
	defer c.Close()
	for node, known := range map[string]bool{"node1": true, "node2": false} {
		if got, err := c.NodeKnown(ctx, node); err != nil || got != known {
			t.Errorf("NodeKnown(%s) = %v, %v; want %v", node, got, err, known)
		}
	}
	if a, err := c.Allocation(ctx, want[0]); err != nil || a.Handle != "default.web-0" || a.Owner["pod"] != "web-0" || a.Owner["node"] != "node1" {
		t.Errorf("Allocation(%s) = %+v, %v; want default.web-0 owned by web-0 on node1", want[0], a, err)
	}
	if a, err := c.Allocation(ctx, netip.MustParseAddr("10.96.0.9")); err != nil || a.Handle != "" {
		t.Errorf("Allocation of a free address = %+v, %v; want none", a, err)
	}
	held, err := c.HandleAllocations(ctx, "default.web-0")
	got := slices.SortedFunc(maps.Keys(held), netip.Addr.Compare)
	if err != nil || !slices.Equal(got, want) || held[want[1]].Owner["pod"] != "web-0" {
		t.Errorf("HandleAllocations = %v, %v; want %v owned by web-0", held, err, want)
	}
	if _, err := c.HandleAllocations(ctx, "default.none"); err == nil {
		t.Error("HandleAllocations of a handle Calico does not have: no error")
	}
	// Issue 33, finding 7: Calico's etcd is warned about as the record
	// store's is; the test's etcd is plain text.
	if why := warned["Calico's etcd"]; !strings.Contains(why, srv.Endpoint()) || len(warned) != 1 {
		t.Errorf("warnings %v; want one for Calico's etcd naming %s", warned, srv.Endpoint())
	}
}
