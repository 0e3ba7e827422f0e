package e2e

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

const cni11 = "1.1.0"

// Scenario 5, control: calico-ipam declares CNI versions up to 1.0.0, so
// a cniVersion 1.1.0 network cannot use it at all.
func TestCNI11CalicoAlone(t *testing.T) { cni11CalicoAlone(t, false) }

// Scenario 5, control, with Calico's Kubernetes datastore.
func TestKubeCNI11CalicoAlone(t *testing.T) { cni11CalicoAlone(t, true) }

func cni11CalicoAlone(t *testing.T, kube bool) {
	ctx := testContext(t)
	c := clusterOn(t, kube, "s5c")
	n := newCNI11(ctx, t, c, false)
	sb := n.sandbox(ctx, t, "pod-a")
	_, err := n.node.Add(ctx, n.net.Name, sb)
	if err == nil || !strings.Contains(err.Error(), "incompatible CNI versions") {
		t.Fatalf("ADD on a 1.1.0 network with calico-ipam alone: got %v, want incompatible CNI versions", err)
	}
	t.Logf("ADD failed as it must: %v", err)
	if err := n.node.Status(ctx, n.net.Name, sb); err == nil {
		t.Errorf("STATUS on a 1.1.0 network with calico-ipam alone succeeded")
	}
	if err := n.node.Del(ctx, n.net.Name, sb); err != nil {
		t.Logf("DEL after the failed ADD: %v", err)
	}
	n.assertHeld(ctx, t, nil)
}

// Scenario 5 with safe-ipam: add, check, status and del through cnitool,
// then GC through libcni with a valid-attachments list. GC must release
// exactly the attachments not in the list: first those libcni still has
// cached (it DELs them through ptp), then, with libcni's cache lost,
// those only safe-ipam knows, through safe-ipam's own GC.
func TestCNI11SafeIPAM(t *testing.T) { cni11SafeIPAM(t, false) }

// Scenario 5 with safe-ipam and Calico's Kubernetes datastore: the records
// stay in safe-ipam's file store, GC included.
func TestKubeCNI11SafeIPAM(t *testing.T) { cni11SafeIPAM(t, true) }

func cni11SafeIPAM(t *testing.T, kube bool) {
	ctx := testContext(t)
	c := clusterOn(t, kube, "s5s")
	n := newCNI11(ctx, t, c, true)
	keep, cached, deleted, lost := n.sandbox(ctx, t, "keep"), n.sandbox(ctx, t, "cached"), n.sandbox(ctx, t, "deleted"), n.sandbox(ctx, t, "lost")
	addrs := map[string]netip.Addr{}
	for _, sb := range []testbed.Sandbox{keep, cached, deleted, lost} {
		res, err := n.node.Add(ctx, n.net.Name, sb)
		if err != nil {
			t.Fatalf("ADD of %s: %v", sb.Pod, err)
		}
		p, err := testbed.ResultIPv4(res)
		if err != nil {
			t.Fatal(err)
		}
		addrs[sb.Pod.Name] = p.Addr()
	}
	if err := n.node.Check(ctx, n.net.Name, keep); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := n.node.Status(ctx, n.net.Name, keep); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	if err := n.node.Del(ctx, n.net.Name, deleted); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	n.assertHeld(ctx, t, []netip.Addr{addrs["keep"], addrs["cached"], addrs["lost"]})

	// The runtime lost "lost": its sandbox and libcni's cache are gone.
	if err := c.Netns.Remove(ctx, lost.Netns); err != nil {
		t.Fatal(err)
	}
	n.forgetCachedResult(t, lost)
	if err := n.node.GC(ctx, n.net.Name, []testbed.Sandbox{keep}); err != nil {
		t.Fatalf("GC through the ptp network: %v", err)
	}
	n.assertHeld(ctx, t, []netip.Addr{addrs["keep"], addrs["lost"]})
	n.assertNetns(ctx, t, cached, nil)

	if err := n.ipamOnly(t).GC(ctx, n.net.Name, []testbed.Sandbox{keep}); err != nil {
		t.Fatalf("GC straight to safe-ipam: %v", err)
	}
	n.assertHeld(ctx, t, []netip.Addr{addrs["keep"]})
	n.assertNetns(ctx, t, keep, []netip.Addr{addrs["keep"]})
	if err := n.node.Check(ctx, n.net.Name, keep); err != nil {
		t.Errorf("CHECK after GC: %v", err)
	}

	if err := n.node.Del(ctx, n.net.Name, keep); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	n.assertHeld(ctx, t, nil)
	leaks, err := c.Leftovers(ctx, n.net.Name, n.net.Safe)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaks) > 0 {
		t.Errorf("left behind: %v", leaks)
	}
}

// Issue 31, finding 9: CRI-O sends GC at every start through libcni's
// GCNetworkList, which injects cni.dev/valid-attachments as null when no
// sandbox of the network exists. With no record, that is nothing to
// collect: success. With records, it is the empty answer safe-ipam gc
// never trusts: nothing is released, and the error says why (code 11),
// not that the list is malformed.
func TestCNI11GCWithNoSandboxOfTheNetwork(t *testing.T) {
	ctx := testContext(t)
	c := clusterOn(t, false, "s5n")
	n := newCNI11(ctx, t, c, true)
	gcNode := n.ipamOnly(t)
	if err := gcNode.GC(ctx, n.net.Name, nil); err != nil {
		t.Fatalf("GC with no sandbox and no record: %v", err)
	}
	sb := n.sandbox(ctx, t, "held")
	res, err := n.node.Add(ctx, n.net.Name, sb)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	p, err := testbed.ResultIPv4(res)
	if err != nil {
		t.Fatal(err)
	}
	n.forgetCachedResult(t, sb) // else libcni DELs it before safe-ipam's GC
	err = gcNode.GC(ctx, n.net.Name, nil)
	if err == nil || !strings.Contains(err.Error(), "is null") || !strings.Contains(err.Error(), "releases nothing") || strings.Contains(err.Error(), "must be a list") {
		t.Fatalf("GC with no sandbox while a record is held: %v; want a refusal saying the null list is not trusted", err)
	}
	n.assertHeld(ctx, t, []netip.Addr{p.Addr()})
	if err := n.node.Del(ctx, n.net.Name, sb); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	n.assertHeld(ctx, t, nil)
}

// cni11 is one node with a cniVersion 1.1.0 network.
type cni11Node struct {
	c    *testbed.Cluster
	node *testbed.Node
	net  testbed.Network
}

func newCNI11(ctx context.Context, t *testing.T, c *testbed.Cluster, safe bool) *cni11Node {
	t.Helper()
	dumpOnFailure(t, c)
	if err := c.Seed(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	n := &cni11Node{c: c, node: c.Node("node1", testbed.Modern)}
	var sc *testbed.SafeConfig
	if safe {
		sc = c.SafeConfig(n.node, "container", nil)
	}
	n.net = c.Network("cni11-net", cni11, n.node, sc)
	if err := n.net.WriteConflist(n.node.ConfDir); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *cni11Node) sandbox(ctx context.Context, t *testing.T, pod string) testbed.Sandbox {
	t.Helper()
	ns, err := n.c.Netns.Add(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	return testbed.Sandbox{Pod: testbed.Pod{Namespace: "default", Name: pod}, Netns: ns}
}

// forgetCachedResult deletes libcni's cache entry for sb, as a node that
// lost /var/lib/cni does.
func (n *cni11Node) forgetCachedResult(t *testing.T, sb testbed.Sandbox) {
	t.Helper()
	f := filepath.Join("/var/lib/cni/results", n.net.Name+"-"+sb.ContainerID()+"-"+testbed.IfName)
	if err := os.Remove(f); err != nil {
		t.Fatalf("forgetting libcni's cache for %s: %v", sb.Pod, err)
	}
}

// ipamOnly is the node with a network whose only plugin is safe-ipam. ptp
// does not forward GC to its IPAM (a FIXME in plugins v1.9.1), so this is
// how the GC a forwarding plugin would send reaches safe-ipam.
func (n *cni11Node) ipamOnly(t *testing.T) *testbed.Node {
	t.Helper()
	plugin := n.net.PluginConfig()
	plugin["type"] = testbed.SafeIPAM
	ipam := plugin["ipam"].(map[string]any)
	ipam["type"] = testbed.SafeIPAM
	delete(ipam, "wraps")
	list, err := json.Marshal(map[string]any{"cniVersion": n.net.CNIVersion, "name": n.net.Name, "plugins": []any{plugin}})
	if err != nil {
		t.Fatal(err)
	}
	gcNode := *n.node
	gcNode.ConfDir = filepath.Join(n.c.Dir, n.node.Name, "ipam-only.d")
	if err := os.MkdirAll(gcNode.ConfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gcNode.ConfDir, n.net.Name+".conflist"), list, 0o644); err != nil {
		t.Fatal(err)
	}
	return &gcNode
}

// assertHeld checks Calico's data holds exactly want.
func (n *cni11Node) assertHeld(ctx context.Context, t *testing.T, want []netip.Addr) {
	t.Helper()
	snap, err := n.c.Calico(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[netip.Addr]bool{}
	for _, a := range snap.Allocations() {
		got[a.IP] = true
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("Calico does not hold %s", w)
		}
		delete(got, w)
	}
	for a := range got {
		t.Errorf("Calico still holds %s", a)
	}
}

func (n *cni11Node) assertNetns(ctx context.Context, t *testing.T, sb testbed.Sandbox, want []netip.Addr) {
	t.Helper()
	prefixes, err := sb.Netns.IPv4Addrs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Addr
	for _, p := range prefixes {
		got = append(got, p.Addr())
	}
	if len(got) != len(want) || (len(got) > 0 && got[0] != want[0]) {
		t.Errorf("%s holds %v, want %v", sb.Netns.Name, got, want)
	}
}
