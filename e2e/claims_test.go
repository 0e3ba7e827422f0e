package e2e

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// Issue 45: on Calico's Kubernetes datastore each node keeps its records
// in its own file store. node1's pod holds X; X is freed behind its back
// (its handle released through Calico alone) and X's block goes to
// node2, which starts pods until Calico hands it X. The control (no
// AddressClaims served: the node fences its own records only, as before
// issue 45) starts a running duplicate across nodes. With the claims
// (served from after X's pod started: node1's gc claims its record),
// node2's ADD is fenced and its allocation quarantined for node1's claim;
// node2's gc keeps it while node1's pod runs, and releases it on the run
// after the one that found the claim gone (node1's DEL released it);
// nothing is left.
func TestClaimsFenceAcrossNodesOnKDD(t *testing.T) {
	for _, claimsServed := range []bool{false, true} {
		name := "control: no claims served"
		if claimsServed {
			name = "claims served"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			tag := "clx"
			if claimsServed {
				tag = "cls"
			}
			c, srv := newKubeClusterServer(t, tag)
			dumpOnFailure(t, c)
			if err := c.Seed(ctx, "node1", "node2"); err != nil {
				t.Fatal(err)
			}
			n1, n2 := c.Node("node1", testbed.Modern), c.Node("node2", testbed.Modern)
			safe2 := c.SafeConfig(n2, "container", nil)
			writeSafeConflists(t, c, n1, n2)
			gc := func(n *testbed.Node, want string) {
				t.Helper()
				out, code := runProgram(ctx, t, c.Bin.Path(testbed.SafeIPAM), "gc", "--conf", filepath.Join(n.ConfDir, calicoNetwork+".conflist"),
					"--cni-bin-dir", c.Bin.Dir, "--dead-nodes", "--quarantine-grace=0s", "--apply")
				if code != 0 || !strings.Contains(out, want) {
					t.Fatalf("%s's gc --apply: exit %d, want %q:\n%s", n.Name, code, want, out)
				}
				t.Logf("%s's gc --dead-nodes --apply:\n%s", n.Name, out)
			}
			holder := podSandbox(t, ctx, c, "holder")
			x := addr(t, ctx, n1, holder)
			if claimsServed {
				// The CRD comes after the pod started, as on a cluster that
				// ran safe-ipam before: node1's gc claims its record.
				if err := srv.Apply("../deploy/safe-ipam-claims.yaml"); err != nil {
					t.Fatal(err)
				}
				gc(n1, "claimed 1 address(es) of records that had none")
			}
			if err := calicoAlone(t, c, "node1").Del(ctx, calicoNetwork, holder); err != nil {
				t.Fatal(err)
			}
			block := netip.PrefixFrom(x, testbed.BlockSize).Masked()
			if err := calicosim.MoveKubeAffinity(ctx, c.Datastore.(testbed.KubeDatastore).Config, block, "node1", "node2"); err != nil {
				t.Fatal(err)
			}
			started, fenced, got := startUntilGiven(t, ctx, c, n2, x, testbed.BlockAddrs)
			switch {
			case !got && !fenced:
				t.Fatalf("Calico never handed node2 %s: the scenario did not happen", x)
			case claimsServed && !fenced:
				t.Fatalf("node2 was given node1's running pod's %s and started with it: a duplicate across nodes", x)
			case !claimsServed && !got:
				t.Fatalf("control: node2's ADD given %s was fenced without claims", x)
			case !claimsServed:
				t.Logf("control: node1's pod and node2's pod both run with %s", x)
			default:
				if !calicoHolds(t, ctx, c, x) {
					t.Fatalf("the fenced allocation of %s was released while node1's pod runs", x)
				}
				gc(n2, "") // node1's pod runs: the quarantine stays
				if !calicoHolds(t, ctx, c, x) {
					t.Fatalf("node2's gc released the quarantined %s while node1's pod runs", x)
				}
			}
			if err := n1.Del(ctx, calicoNetwork, holder); err != nil {
				t.Fatal(err)
			}
			if claimsServed {
				// The claim is gone: one run notes it, the next releases.
				gc(n2, "kept 1 allocation(s) quarantined for holders whose claim is gone")
				if !calicoHolds(t, ctx, c, x) {
					t.Fatalf("node2's gc released the quarantined %s on the run that first found its holder's claim gone", x)
				}
				gc(n2, "released 1 allocation(s) quarantined")
			}
			for _, sb := range started {
				if err := n2.Del(ctx, calicoNetwork, sb); err != nil {
					t.Fatal(err)
				}
			}
			left, err := c.Leftovers(ctx, calicoNetwork, safe2)
			if err != nil || len(left) > 0 {
				t.Errorf("after every DEL and node2's gc: %v, %v", left, err)
			}
		})
	}
}

// Issue 45: on Calico's Kubernetes datastore node1's records die with
// it, but its claims stay in the API server. kube-controllers frees its
// addresses (through calico-ipam alone) and deletes nothing of
// safe-ipam's; the elected gc --dead-nodes sweeps the claims of node1
// once two sweeps found its Node gone, at least --dead-node-grace apart
// by the API server's clock, and Calico may then hand X to node2. One
// sighting is never proof: X stays fenced (the ADD quarantines it and the
// pod gets another address), as it does while node1's Node stands (the
// control: X was freed behind a live holder's back).
func TestDeadNodeClaimsAreSwept(t *testing.T) {
	for _, tc := range []struct {
		name, tag  string
		nodeGone   bool
		sweeps     int
		wantFenced bool
	}{
		{name: "two sweeps release node1's claims", tag: "cd2", nodeGone: true, sweeps: 2},
		{name: "one sweep found node1 gone: X stays fenced", tag: "cd1", nodeGone: true, sweeps: 1, wantFenced: true},
		{name: "control: node1 still known, X stays fenced", tag: "cdc", sweeps: 2, wantFenced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			c, srv := newKubeClusterServer(t, tc.tag)
			dumpOnFailure(t, c)
			if err := srv.Apply("../deploy/safe-ipam-claims.yaml"); err != nil {
				t.Fatal(err)
			}
			if err := c.Seed(ctx, "node1", "node2", "node3"); err != nil {
				t.Fatal(err)
			}
			n1, n2 := c.Node("node1", testbed.Modern), c.Node("node2", testbed.Modern)
			safe2 := c.SafeConfig(n2, "container", nil)
			writeSafeConflists(t, c, n1, n2)
			holder := podSandbox(t, ctx, c, "on-node1")
			x := addr(t, ctx, n1, holder)
			claim := claims.Name(calicoNetwork, x)
			if !claimed(t, ctx, srv, claim) {
				t.Fatalf("node1's ADD of %s made no claim %s", x, claim)
			}
			// node1 dies: kube-controllers frees its address and hands its
			// block on; its Node goes (the control keeps it).
			if err := calicoAlone(t, c, "node1").Del(ctx, calicoNetwork, holder); err != nil {
				t.Fatal(err)
			}
			if err := calicosim.MoveKubeAffinity(ctx, c.Datastore.(testbed.KubeDatastore).Config, netip.PrefixFrom(x, testbed.BlockSize).Masked(), "node1", "node2"); err != nil {
				t.Fatal(err)
			}
			if tc.nodeGone {
				if err := srv.Client().CoreV1().Nodes().Delete(ctx, "node1", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// An old note that node2, the sweeping node, was gone (it was
			// re-registering once) is forgotten: it runs.
			leases := srv.Client().CoordinationV1().Leases(claims.LeaseNamespace)
			lease, err := leases.Get(ctx, claims.LeaseName(calicoNetwork), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lease.Annotations = map[string]string{claims.Group + "/gone": `{"node2":{"since":"2025-01-01T00:00:00Z","grace":"1s"}}`}
			if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			gc := []string{"gc", "--conf", filepath.Join(n2.ConfDir, calicoNetwork+".conflist"),
				"--cni-bin-dir", c.Bin.Dir, "--dead-nodes", "--dead-node-grace=1s", "--apply"}
			for i := range tc.sweeps {
				if i > 0 {
					time.Sleep(3 * time.Second) // more than the grace and the Date's second
				}
				out, code := runProgram(ctx, t, c.Bin.Path(testbed.SafeIPAM), gc...)
				want := "node node1 is gone, found so first now"
				switch {
				case !tc.nodeGone:
					want = "gc: 1 AddressClaims of network k8s-pod-network on other nodes (swept by node node2); 0 to release, 1 kept" // counted, not read: Calico knows node1
				case i > 0:
					want = "released"
				}
				if code != 0 || !strings.Contains(out, want) {
					t.Fatalf("sweep %d: exit %d, want %q:\n%s", i+1, code, want, out)
				}
				t.Logf("sweep %d:\n%s", i+1, out)
				if lease, err = leases.Get(ctx, lease.Name, metav1.GetOptions{}); err != nil || strings.Contains(lease.Annotations[claims.Group+"/gone"], `"node2"`) {
					t.Fatalf("after sweep %d the sweeps' notes are %v, %v; want none of node2, which sweeps", i+1, lease.Annotations, err)
				}
			}
			if still := claimed(t, ctx, srv, claim); still != tc.wantFenced {
				t.Fatalf("after %d sweep(s): node1's claim stands %v, want %v", tc.sweeps, still, tc.wantFenced)
			}
			started, fenced, got := startUntilGiven(t, ctx, c, n2, x, 2*testbed.BlockAddrs)
			switch {
			case !got && !fenced:
				t.Fatalf("Calico never handed node2 the dead node's %s: the scenario did not happen", x)
			case fenced != tc.wantFenced:
				t.Fatalf("node2's ADD given %s: fenced %v, want %v", x, fenced, tc.wantFenced)
			}
			if tc.wantFenced {
				return
			}
			for _, sb := range started {
				if err := n2.Del(ctx, calicoNetwork, sb); err != nil {
					t.Fatal(err)
				}
			}
			if left, err := c.Leftovers(ctx, calicoNetwork, safe2); err != nil || len(left) > 0 || claimed(t, ctx, srv, claim) {
				t.Errorf("after every DEL: %v, %v, claim %s stands %v", left, err, claim, claimed(t, ctx, srv, claim))
			}
		})
	}
}

// claimed says whether the AddressClaim name exists.
func claimed(t *testing.T, ctx context.Context, srv *kubetest.Server, name string) bool {
	t.Helper()
	gvr := schema.GroupVersionResource{Group: claims.Group, Version: claims.Version, Resource: claims.Resource}
	dyn, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	_, err = dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// writeSafeConflists writes Calico's conflist with safe-ipam (file store)
// on each node.
func writeSafeConflists(t *testing.T, c *testbed.Cluster, nodes ...*testbed.Node) {
	t.Helper()
	for _, n := range nodes {
		if err := c.Network(calicoNetwork, "1.0.0", n, c.SafeConfig(n, "container", nil)).WriteConflist(n.ConfDir); err != nil {
			t.Fatal(err)
		}
	}
}
