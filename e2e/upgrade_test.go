package e2e

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/statefulset"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// Scenario 2: a cluster upgraded to Calico 3.x. The running web-0 got its
// address before the upgrade, under the pod-name handle default.web-0
// (seeded in Calico's format). Another sandbox of the same pod name then
// gets ADD and DEL: replaced (ADD works), or failed (ptp breaks after IPAM
// allocated, rolls back with an IPAM DEL, and kubelet DELs too). Calico
// 3.x's DEL also releases the pod-name handle.
func TestUpgradedClusterSandboxDel(t *testing.T) { runUpgraded(t, false) }

// Scenario 2 with Calico's data in its Kubernetes datastore.
func TestKubeUpgradedClusterSandboxDel(t *testing.T) { runUpgraded(t, true) }

func runUpgraded(t *testing.T, kube bool) {
	for _, tc := range []struct {
		name   string
		tag    string
		safe   bool
		failed bool
	}{
		{name: "replaced sandbox/calico-ipam alone", tag: "s2rc", failed: false},
		{name: "replaced sandbox/safe-ipam", tag: "s2rs", safe: true, failed: false},
		{name: "failed sandbox/calico-ipam alone", tag: "s2fc", failed: true},
		{name: "failed sandbox/safe-ipam", tag: "s2fs", safe: true, failed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			c := clusterOn(t, kube, tc.tag)
			dumpOnFailure(t, c)
			u := newUpgraded(ctx, t, c, tc.safe)
			sb := u.sandbox(ctx, t, "web-0-retry")
			if tc.failed {
				u.failedSandbox(ctx, t, sb)
			} else {
				u.replacedSandbox(ctx, t, sb)
			}
			u.assertLiveAddress(ctx, t, tc.safe)
			u.assertNothingElseHeld(ctx, t)
			u.logFinalDel(ctx, t)
		})
	}
}

// upgraded is a node of a cluster upgraded from Calico 2.x, with web-0
// still running from before the upgrade.
type upgraded struct {
	c    *testbed.Cluster
	node *testbed.Node
	net  testbed.Network
	live testbed.Sandbox
	addr netip.Addr
}

const legacyWeb0Handle = "default.web-0"

func newUpgraded(ctx context.Context, t *testing.T, c *testbed.Cluster, safe bool) *upgraded {
	t.Helper()
	if err := c.Seed(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	u := &upgraded{c: c, node: c.Node("node1", testbed.Modern)}
	var sc *testbed.SafeConfig
	if safe {
		sc = c.SafeConfig(u.node, "container", nil)
	}
	u.net = c.Network(statefulset.Network, "1.0.0", u.node, sc)
	if err := u.net.WriteConflist(u.node.ConfDir); err != nil {
		t.Fatal(err)
	}
	addr, err := c.SeedLegacyHandle(ctx, "node1", legacyWeb0Handle)
	if err != nil {
		t.Fatal(err)
	}
	u.addr = addr
	u.live = u.sandbox(ctx, t, "web-0-live")
	if err := u.live.Netns.AddStubAddress(ctx, netip.PrefixFrom(addr, testbed.BlockSize)); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u *upgraded) sandbox(ctx context.Context, t *testing.T, name string) testbed.Sandbox {
	t.Helper()
	ns, err := u.c.Netns.Add(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return testbed.Sandbox{Pod: statefulset.Pod, Netns: ns}
}

func (u *upgraded) replacedSandbox(ctx context.Context, t *testing.T, sb testbed.Sandbox) {
	t.Helper()
	if _, err := u.node.Add(ctx, u.net.Name, sb); err != nil {
		t.Fatalf("ADD of the replacement sandbox: %v", err)
	}
	if err := u.node.Del(ctx, u.net.Name, sb); err != nil {
		t.Fatalf("DEL of the replacement sandbox: %v", err)
	}
}

// failedSandbox makes ptp fail after IPAM allocated: eth0 already exists.
func (u *upgraded) failedSandbox(ctx context.Context, t *testing.T, sb testbed.Sandbox) {
	t.Helper()
	if err := sb.Netns.AddStubLink(ctx, testbed.IfName); err != nil {
		t.Fatal(err)
	}
	_, err := u.node.Add(ctx, u.net.Name, sb)
	var cmdErr *testbed.CommandError
	if !errors.As(err, &cmdErr) || !strings.Contains(cmdErr.Message, "already exists") {
		t.Fatalf("ADD into a netns that has eth0: got %v, want ptp's 'already exists' failure", err)
	}
	if err := u.node.Del(ctx, u.net.Name, sb); err != nil {
		t.Fatalf("kubelet's DEL after the failed ADD: %v", err)
	}
}

// assertLiveAddress checks Calico's data for the running pod's address:
// the control must show it freed, safe-ipam must keep it.
func (u *upgraded) assertLiveAddress(ctx context.Context, t *testing.T, safe bool) {
	t.Helper()
	snap, err := u.c.Calico(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, held := snap.Lookup(u.addr)
	inNetns, err := u.live.Netns.IPv4Addrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: live web-0 holds %v in its netns; Calico: held=%v handle=%q", u.net.Label(), inNetns, held, a.Handle)
	switch {
	case safe && (!held || a.Handle != legacyWeb0Handle):
		t.Errorf("the live pod's %s is no longer held by %s in Calico's data (held=%v, handle=%q)", u.addr, legacyWeb0Handle, held, a.Handle)
	case !safe && held:
		t.Errorf("control: the live pod's %s is still held (%q); the failure did not reproduce", u.addr, a.Handle)
	}
}

// assertNothingElseHeld checks that the sandbox that came and went left
// nothing: no Calico allocation besides the live pod's, no record.
func (u *upgraded) assertNothingElseHeld(ctx context.Context, t *testing.T) {
	t.Helper()
	leaks, err := u.c.Leftovers(ctx, u.net.Name, u.net.Safe)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leaks {
		if !strings.Contains(l, u.addr.String()) && !strings.Contains(l, legacyWeb0Handle) {
			t.Errorf("left behind: %s", l)
		}
	}
}

// logFinalDel deletes the live pod, as happens when it is finally removed,
// and logs whether its pre-upgrade address was released. It asserts
// nothing: safe-ipam, by design, never releases by pod name, so a pod
// allocated before it was installed keeps its legacy handle.
func (u *upgraded) logFinalDel(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := u.node.Del(ctx, u.net.Name, u.live); err != nil {
		t.Errorf("DEL of the live pod: %v", err)
		return
	}
	snap, err := u.c.Calico(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a, held := snap.Lookup(u.addr); held {
		t.Logf("%s: after the live pod's own DEL, its pre-upgrade %s is still held by %q", u.net.Label(), u.addr, a.Handle)
	} else {
		t.Logf("%s: the live pod's own DEL released its pre-upgrade %s", u.net.Label(), u.addr)
	}
}
