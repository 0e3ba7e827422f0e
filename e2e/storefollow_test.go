package e2e

import (
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"
)

// Issue 44, item 3: install --store=etcd follows Calico's etcd. Calico's
// config names its etcd through a proxy when safe-ipam is installed with
// --store=etcd; calico-config then moves it (calico-node renders the
// config again, and the watch, which runs without --store, installs
// again), and the proxy goes. Pods still start: the records follow
// Calico's etcd. Before, the node settings kept the endpoints of install
// time, and every ADD failed ("etcd ... not reachable").
func TestStoreEtcdFollowsCalicosEtcd(t *testing.T) {
	ctx := testContext(t)
	c := newCluster(t, "sfollow")
	dumpOnFailure(t, c)
	n, _ := nodeWithStore(t, ctx, c, false)
	proxy, err := containerd.StartLocalEtcdProxy(c.EtcdEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	n.setCalico(t, "etcd_endpoints", proxy.Endpoint())
	n.admin(t, 0, "install", "--store=etcd")
	n.add(t, ctx, podSandbox(t, ctx, c, "p"))

	n.setCalico(t, "etcd_endpoints", c.EtcdEndpoint) // calico-node renders the moved etcd
	n.admin(t, 0, "install")                         // the watch's re-install: no --store
	proxy.Close()
	n.add(t, ctx, podSandbox(t, ctx, c, "q"))
}
