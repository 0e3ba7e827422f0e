package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/statefulset"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// A pool of one /29 block, filled before the ADD that must fail.
const (
	fullPoolName = "full-ippool"
	fullPoolCIDR = "10.245.0.0/29"
)

// Scenario 4: DELs the spec requires to succeed, and an ADD the delegate
// fails. Each must leave nothing allocated in Calico's data, nothing in
// any netns, and no safe-ipam record.
func TestDelEdgeCases(t *testing.T) {
	cases := []struct {
		name string
		tag  string
		// full seeds only a pool with no free address.
		full bool
		run  func(ctx context.Context, t *testing.T, e *edge)
	}{
		{name: "repeated DEL", tag: "s4r", run: func(ctx context.Context, t *testing.T, e *edge) {
			sb := e.sandbox(ctx, t, "pod-a")
			e.mustAdd(ctx, t, sb)
			e.mustDel(ctx, t, sb, "first DEL")
			e.mustDel(ctx, t, sb, "repeated DEL")
		}},
		{name: "DEL without ADD", tag: "s4n", run: func(ctx context.Context, t *testing.T, e *edge) {
			e.mustDel(ctx, t, e.sandbox(ctx, t, "pod-a"), "DEL without ADD")
		}},
		{name: "DEL after the netns is deleted", tag: "s4g", run: func(ctx context.Context, t *testing.T, e *edge) {
			sb := e.sandbox(ctx, t, "pod-a")
			e.mustAdd(ctx, t, sb)
			if err := e.c.Netns.Remove(ctx, sb.Netns); err != nil {
				t.Fatal(err)
			}
			e.mustDel(ctx, t, sb, "DEL after the netns is gone")
		}},
		{name: "ADD failure in the delegate (exhausted pool)", tag: "s4x", full: true, run: func(ctx context.Context, t *testing.T, e *edge) {
			sb := e.sandbox(ctx, t, "pod-a")
			if _, err := e.node.Add(ctx, e.net.Name, sb); err == nil {
				t.Fatalf("ADD in a full pool succeeded")
			} else {
				t.Logf("ADD in a full pool failed as it must: %v", err)
			}
			e.assertNetnsEmpty(ctx, t, sb)
			e.mustDel(ctx, t, sb, "kubelet's DEL after the failed ADD")
		}},
	}
	for _, tc := range cases {
		for _, safe := range []bool{false, true} {
			name := tc.name + "/calico-ipam alone"
			tag := tc.tag + "c"
			if safe {
				name, tag = tc.name+"/safe-ipam", tc.tag+"s"
			}
			t.Run(name, func(t *testing.T) {
				ctx := testContext(t)
				e := newEdge(ctx, t, newCluster(t, tag), safe, tc.full)
				tc.run(ctx, t, e)
				e.assertNothingLeft(ctx, t)
			})
		}
	}
}

// edge is one node with one network for the edge cases.
type edge struct {
	c    *testbed.Cluster
	node *testbed.Node
	net  testbed.Network
	// fillers are the addresses seeded to fill the pool; they must stay.
	fillers []netip.Addr
	made    []testbed.Sandbox
}

func newEdge(ctx context.Context, t *testing.T, c *testbed.Cluster, safe, full bool) *edge {
	t.Helper()
	dumpOnFailure(t, c)
	e := &edge{c: c, node: c.Node("node1", testbed.Modern)}
	var sc *testbed.SafeConfig
	if safe {
		sc = c.SafeConfig(e.node, "container", nil)
	}
	e.net = c.Network(statefulset.Network, "1.0.0", e.node, sc)
	if full {
		e.fillPool(ctx, t)
	} else if err := c.Seed(ctx, e.node.Name); err != nil {
		t.Fatal(err)
	}
	if err := e.net.WriteConflist(e.node.ConfDir); err != nil {
		t.Fatal(err)
	}
	return e
}

// fillPool seeds a one-block pool, the only one in the cluster, and takes
// every address in it.
func (e *edge) fillPool(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := calicosim.SeedIPPool(ctx, e.c.Etcd, fullPoolName, fullPoolCIDR, testbed.BlockSize); err != nil {
		t.Fatal(err)
	}
	if err := calicosim.SeedNode(ctx, e.c.Etcd, e.node.Name); err != nil {
		t.Fatal(err)
	}
	for i := range testbed.BlockAddrs {
		addr, err := calicosim.SeedLegacyHandle(ctx, e.c.Etcd, e.node.Name, fmt.Sprintf("default.filler-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		e.fillers = append(e.fillers, addr)
	}
	e.net.Pools = []string{fullPoolCIDR}
}

func (e *edge) sandbox(ctx context.Context, t *testing.T, pod string) testbed.Sandbox {
	t.Helper()
	ns, err := e.c.Netns.Add(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	sb := testbed.Sandbox{Pod: testbed.Pod{Namespace: "default", Name: pod}, Netns: ns}
	e.made = append(e.made, sb)
	return sb
}

func (e *edge) mustAdd(ctx context.Context, t *testing.T, sb testbed.Sandbox) {
	t.Helper()
	if _, err := e.node.Add(ctx, e.net.Name, sb); err != nil {
		t.Fatalf("ADD: %v", err)
	}
}

func (e *edge) mustDel(ctx context.Context, t *testing.T, sb testbed.Sandbox, what string) {
	t.Helper()
	if err := e.node.Del(ctx, e.net.Name, sb); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (e *edge) assertNetnsEmpty(ctx context.Context, t *testing.T, sb testbed.Sandbox) {
	t.Helper()
	addrs, err := sb.Netns.IPv4Addrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) > 0 {
		t.Errorf("%s holds %v", sb.Netns.Name, addrs)
	}
}

// assertNothingLeft checks Calico's data holds only the fillers, every
// netns still there is empty, and safe-ipam recorded nothing.
func (e *edge) assertNothingLeft(ctx context.Context, t *testing.T) {
	t.Helper()
	snap, err := e.c.Calico(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var held []netip.Addr
	for _, a := range snap.Allocations() {
		held = append(held, a.IP)
	}
	if !slices.Equal(held, e.fillers) {
		t.Errorf("Calico holds %v, want only the seeded %v", held, e.fillers)
	}
	if bad := snap.Inconsistencies(); len(bad) > 0 {
		t.Errorf("Calico's data is inconsistent: %v", bad)
	}
	for _, sb := range e.made {
		if addrs, err := sb.Netns.IPv4Addrs(ctx); err == nil && len(addrs) > 0 {
			t.Errorf("%s still holds %v", sb.Netns.Name, addrs)
		}
	}
	if e.net.Safe == nil {
		return
	}
	recs, err := e.c.Records(ctx, e.net.Name, e.net.Safe.Store)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		t.Errorf("safe-ipam still records %s (%s, %v)", r.Attachment, r.State, r.IPs)
	}
}
