package testbed

import (
	"context"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/etcdtest"
)

// With a real calico-ipam the suite makes legacy handles by rewriting
// Calico's data; the rewrite must move exactly the pod's addresses and
// leave handles and blocks consistent.
func TestRekeyToPodHandle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		secondary map[string]string
		// moved: the address ends under default.web-0, else it stays.
		moved bool
	}{
		{"calico-ipam saw the pod", map[string]string{"namespace": "default", "pod": "web-0", "node": "node1"}, true},
		{"calico-ipam saw no pod", map[string]string{"node": "node1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			cli := etcdtest.Start(t).Client()
			if err := calicosim.SeedIPPool(ctx, cli, PoolName, PoolCIDR, BlockSize); err != nil {
				t.Fatal(err)
			}
			sb := Sandbox{Pod: Pod{Namespace: "default", Name: "web-0"}, Netns: Netns{Name: "x"}}
			from, want := "net."+sb.ContainerID(), "default.web-0"
			if !tc.moved {
				want = from
			}
			pools, err := calicosim.ReadIPPools(ctx, cli)
			if err != nil {
				t.Fatal(err)
			}
			a := &calicosim.Allocator{Client: cli, Node: "node1"}
			asg, err := a.Assign(ctx, pools, from, tc.secondary)
			if err != nil {
				t.Fatal(err)
			}
			other, err := a.Assign(ctx, pools, "net.other", map[string]string{"namespace": "default", "pod": "web-1"})
			if err != nil {
				t.Fatal(err)
			}
			if err := RekeyToPodHandle(ctx, cli, "net", sb.ContainerID(), sb.Pod); err != nil {
				t.Fatal(err)
			}
			snap, err := calicosim.State(ctx, cli)
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
			if bad := snap.Inconsistencies(); len(bad) > 0 {
				t.Errorf("inconsistent Calico data: %v", bad)
			}
		})
	}
}
