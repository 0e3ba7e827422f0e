package e2e

import (
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/statefulset"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/install"
)

// Issue 30, item 2: `install --store=etcd` wrote a store without
// endpoints, and every ADD then failed (code 7). It takes Calico's etcd
// from Calico's own keys: a pod's ADD succeeds and its record is in that
// etcd.
func TestInstallStoreEtcdThenADD(t *testing.T) {
	for _, mode := range []string{install.ModeTakeover, install.ModeConflist} {
		t.Run(mode, func(t *testing.T) {
			ctx := testContext(t)
			c := newCluster(t, "ie"+mode[:1])
			dumpOnFailure(t, c)
			if err := c.Seed(ctx, "node1"); err != nil {
				t.Fatal(err)
			}
			n := newCalicoNode(t, c)
			n.admin(t, 0, "install", "--mode="+mode, "--store=etcd")
			n.assertProtected(t, ctx)
			ns, err := c.Netns.Add(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			n.add(t, ctx, testbed.Sandbox{Pod: statefulset.Pod, Netns: ns})
			recs, err := c.Records(ctx, calicoNetwork, testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1"))
			if err != nil || len(recs) != 1 {
				t.Fatalf("records in Calico's etcd after the ADD: %d, %v; want the pod's", len(recs), err)
			}
			out := n.admin(t, 0, "uninstall")
			if !strings.Contains(out, "forgot 1 record(s)") {
				t.Errorf("uninstall:\n%s", out)
			}
		})
	}
}
