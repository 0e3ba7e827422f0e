package e2e

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
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
func TestOutsideReleaseAcrossNodesOnKDD(t *testing.T) {
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
			for _, n := range []*testbed.Node{n1, n2} {
				if err := c.Network(calicoNetwork, "1.0.0", n, c.SafeConfig(n, "container", nil)).WriteConflist(n.ConfDir); err != nil {
					t.Fatal(err)
				}
			}
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
