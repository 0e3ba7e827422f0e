package testbed

import (
	"context"
	"net/netip"
	"testing"

	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// calicoOn is one Calico datastore for a test: where the rewrite works
// and an allocator that writes calico-ipam's data there.
type calicoOn struct {
	name  string
	start func(t *testing.T) (Datastore, *calicosim.Allocator)
}

var datastores = []calicoOn{
	{"etcd", func(t *testing.T) (Datastore, *calicosim.Allocator) {
		srv := etcdtest.Start(t)
		return EtcdDatastore{Client: srv.Client(), Endpoint: srv.Endpoint()}, &calicosim.Allocator{Client: srv.Client(), Node: "node1"}
	}},
	{"kubernetes", func(t *testing.T) (Datastore, *calicosim.Allocator) {
		crds := calicodata.Require(t, calicodata.CRDs)
		srv := kubetest.Start(t)
		if err := srv.Apply(crds); err != nil {
			t.Fatal(err)
		}
		dyn, err := dynamic.NewForConfig(srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		return KubeDatastore{Config: srv.Config(), Kubeconfig: srv.Kubeconfig}, &calicosim.Allocator{Kube: dyn, Node: "node1"}
	}},
}

// With a real calico-ipam the suite makes legacy handles by rewriting
// Calico's data; the rewrite must move exactly the pod's addresses and
// leave handles and blocks consistent, in either datastore.
func TestRekeyToPodHandle(t *testing.T) {
	for _, ds := range datastores {
		for _, tc := range []struct {
			name      string
			secondary map[string]string
			// moved: the address ends under default.web-0, else it stays.
			moved bool
		}{
			{"calico-ipam saw the pod", map[string]string{"namespace": "default", "pod": "web-0", "node": "node1"}, true},
			{"calico-ipam saw no pod", map[string]string{"node": "node1"}, false},
		} {
			t.Run(ds.name+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				store, a := ds.start(t)
				sb := Sandbox{Pod: Pod{Namespace: "default", Name: "web-0"}, Netns: Netns{Name: "x"}}
				from, want := "net."+sb.ContainerID(), "default.web-0"
				if !tc.moved {
					want = from
				}
				pools := []calico.IPPool{calico.NewIPPool(PoolName, netip.MustParsePrefix(PoolCIDR), BlockSize)}
				asg, err := a.Assign(ctx, pools, from, tc.secondary)
				if err != nil {
					t.Fatal(err)
				}
				other, err := a.Assign(ctx, pools, "net.other", map[string]string{"namespace": "default", "pod": "web-1"})
				if err != nil {
					t.Fatal(err)
				}
				if err := store.Rekey(ctx, "net", sb.ContainerID(), sb.Pod); err != nil {
					t.Fatal(err)
				}
				snap, err := store.State(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got, ok := snap.Lookup(asg.IP); !ok || got.Handle != want {
					t.Errorf("%s is held by %q (%v), want %q", asg.IP, got.Handle, ok, want)
				}
				if got, _ := snap.Lookup(other.IP); got.Handle != "net.other" {
					t.Errorf("another pod's %s moved to %q", other.IP, got.Handle)
				}
				if snap.HandleCount(want) != 1 {
					t.Errorf("handle %s counts %d, want 1", want, snap.HandleCount(want))
				}
				if from != want && snap.HandleCount(from) != 0 {
					t.Errorf("handle %s still counts %d", from, snap.HandleCount(from))
				}
				if bad := snap.Inconsistencies(); len(bad) > 0 {
					t.Errorf("inconsistent Calico data: %v", bad)
				}
			})
		}
	}
}
