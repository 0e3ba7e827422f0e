package main

import (
	"context"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/cni/lookup"
	"github.com/safe-ipam/safe-ipam/ipam/cni/lookup/etcdlookup"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// safe-ipam reads Calico's etcd (a VM pod's address, a holder on another
// node, an adopted handle) through safe-ipam-etcd: each read gives what
// the etcd build reads itself, its warnings included, and an error stays
// an error. safe-ipam itself answers no such read.
func TestCNIBuildReadsCalicosEtcdThroughSafeIPAMEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	pools := []calico.IPPool{calico.NewIPPool("pool", netip.MustParsePrefix("10.96.0.0/26"), 26)}
	alloc := &calicosim.Allocator{Client: srv.Client(), Node: "node1"}
	asg, err := alloc.Assign(ctx, pools, "default.web-0", map[string]string{"namespace": "default", "pod": "web-0", "node": "node1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client().Put(ctx, calico.NodeKey("node1"), `{"kind":"Node"}`); err != nil {
		t.Fatal(err)
	}
	conf := config.CalicoSettings{DatastoreType: config.DatastoreEtcd, EtcdEndpoints: srv.Endpoint()}
	warned := map[string]string{}
	relayed := lookup.NewRelayed(filepath.Join(binDir, builds.EtcdBinary), conf, func(transport, why string) { warned[transport] = why })
	itself := etcdlookup.New(conf, nil)
	defer itself.Close()
	ip := asg.Prefix().Addr()
	for _, read := range []struct {
		name string
		do   func(lookup.Reader) (any, error)
	}{
		{"a Node Calico has", func(r lookup.Reader) (any, error) { return r.NodeKnown(ctx, "node1") }},
		{"a Node it has not", func(r lookup.Reader) (any, error) { return r.NodeKnown(ctx, "node2") }},
		{"an allocated address", func(r lookup.Reader) (any, error) { return r.Allocation(ctx, ip) }},
		{"a free address", func(r lookup.Reader) (any, error) { return r.Allocation(ctx, netip.MustParseAddr("10.96.0.9")) }},
		{"a handle", func(r lookup.Reader) (any, error) { return r.HandleAllocations(ctx, "default.web-0") }},
		{"a handle Calico has not", func(r lookup.Reader) (any, error) { return r.HandleAllocations(ctx, "default.none") }},
	} {
		t.Run(read.name, func(t *testing.T) {
			want, wantErr := read.do(itself)
			got, err := read.do(relayed)
			if (err != nil) != (wantErr != nil) || (err == nil && !reflect.DeepEqual(got, want)) {
				t.Errorf("through %s: %#v, %v; itself: %#v, %v", builds.EtcdBinary, got, err, want, wantErr)
			}
		})
	}
	if why := warned["Calico's etcd"]; !strings.Contains(why, srv.Endpoint()) {
		t.Errorf("warnings %v; want the plain-text etcd at %s", warned, srv.Endpoint())
	}
	lean := lookup.NewRelayed(filepath.Join(binDir, builds.CNIBinary), conf, nil)
	if _, err := lean.NodeKnown(ctx, "node1"); err == nil || !strings.Contains(err.Error(), "does not read Calico's etcd") {
		t.Errorf("a read through safe-ipam itself: %v; want it refused", err)
	}
	gone := lookup.NewRelayed(filepath.Join(t.TempDir(), builds.EtcdBinary), conf, nil)
	if _, err := gone.Allocation(ctx, ip); err == nil {
		t.Error("a read through a missing safe-ipam-etcd: no error")
	}
}
