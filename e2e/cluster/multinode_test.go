package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubenode"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// The cross-node scenarios of issue 34 run on three nodes: A, B and C.
// They run two at a time (t.Parallel, go test's -parallel of 2 cores),
// after the one-node scenarios: each cluster's nodes have their own netns,
// scratch dirs, cgroups and API server, and mostly wait on the kubelets'
// and gc's periods (the suite took 28 minutes one at a time).
var threeNodes = []string{"node1", "node2", "node3"}

// partitionGrace is how long a silent kubelet's Node stays Ready: short,
// so that a stopped kubelet's node turns unreachable within the test, and
// long enough for a kubelet on a loaded 2-core machine (it reports every
// 10 s).
const partitionGrace = 20 * time.Second

// Scenario 1 of issue 34, partition and return: node A's kubelet stops
// (its Node turns NotReady, unreachable, not deleted); web-0, with a
// Calico 2.x pod-name handle, is force-deleted and comes up on node B; A's
// kubelet returns and tears the old sandbox down: a DEL by pod name, late.
//
// Control (Calico alone): B's web-0 address is freed in Calico's data and
// handed on, to the pod B then refuses (the /32 route is web-0's). With
// safe-ipam: never, across A's garbage collection's DELs of the old
// sandbox too, and nothing is left once the pods are gone.
func TestPartitionAndReturn(t *testing.T) { partitionAndReturn(t, false) }

// TestPartitionAndReturnOnKDD is TestPartitionAndReturn on Calico's
// Kubernetes datastore (issue 45), each node's records in its own file
// store: the late DEL on A finds A's record of the old sandbox, and
// releases nothing of web-0's on B. Its control is the etcd one's: Calico
// alone's late DEL by pod name on a moved node is the same on either
// datastore (the e2e suite's TestKubeStatefulSetMovedNodeLateDel runs it
// on KDD), and the suite's time is bounded.
func TestPartitionAndReturnOnKDD(t *testing.T) { partitionAndReturn(t, true) }

func partitionAndReturn(t *testing.T, kdd bool) {
	t.Parallel() // see threeNodes
	variants := controlAndSafe
	if kdd {
		variants = safeOnly
	}
	variants(t, func(t *testing.T, safe bool) {
		ctx := testContext(t, 8*time.Minute)
		c := newClusterOn(t, true, threeNodes, partitionGrace, kdd)
		a, b := c.nodes[0], c.nodes[1]
		c.legacyWeb0(ctx, safe)
		c.createWebOn(ctx, onNodes(podSpec(true), a.Name, b.Name))
		old := c.pod(ctx, "web-0")
		if old.Spec.NodeName != a.Name {
			t.Fatalf("web-0 runs on %s, want %s (preferred)", old.Spec.NodeName, a.Name)
		}
		w := c.watch(ctx, "default")
		start := time.Now()
		a.StopKubelet()
		if err := a.WaitUnreachable(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s unreachable %s after its kubelet stopped", a.Name, time.Since(start).Round(time.Second))
		c.forceDeleteWeb0(ctx)
		web0 := c.pod(ctx, "web-0")
		if web0.Spec.NodeName != b.Name {
			t.Fatalf("the new web-0 runs on %s, want %s", web0.Spec.NodeName, b.Name)
		}
		if err := a.StartKubelet(ctx); err != nil {
			t.Fatal(err)
		}
		c.waitTornDown(a, old.UID, 0)
		t.Logf("%s's kubelet tore the old web-0 sandbox down %s after it stopped", a.Name, time.Since(start).Round(time.Second))
		// Handed on: B's block hands the freed address out after its
		// other free ones.
		for i := 1; i <= testbed.BlockAddrs && c.refused(ctx) == ""; i++ {
			filler := fmt.Sprintf("filler-%d", i)
			if _, err := c.kube.CoreV1().Pods("default").Create(ctx, podOn(filler, b.Name), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			c.waitStarted(ctx, filler, time.Minute)
		}
		if !safe {
			c.requireHandedOn(w, web0)
			return
		}
		// The kubelet's garbage collection DELs the old sandbox again
		// within its minute.
		c.waitTornDown(a, old.UID, 1)
		w.stop()
		c.requireHealthy(ctx, w)
		if err := c.kube.AppsV1().StatefulSets("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c.releaseAll(ctx)
	})
}

// controlAndSafe runs f as two subtests: the control (Calico alone), then
// with safe-ipam.
// safeOnly runs f with safe-ipam alone, as controlAndSafe's second half.
func safeOnly(t *testing.T, f func(t *testing.T, safe bool)) {
	t.Run("safe-ipam", func(t *testing.T) { f(t, true) })
}

func controlAndSafe(t *testing.T, f func(t *testing.T, safe bool)) {
	for _, safe := range []bool{false, true} {
		name := map[bool]string{false: "calico alone", true: "safe-ipam"}[safe]
		t.Run(name, func(t *testing.T) { f(t, safe) })
	}
}

// requireHandedOn fails the control unless the running web-0's address
// was free in Calico's data and then refused to another pod on its node.
func (c *cluster) requireHandedOn(w *watcher, web0 *corev1.Pod) {
	c.t.Helper()
	ip := web0.Status.PodIP
	seen := w.seen()
	free := slices.ContainsFunc(seen, func(s string) bool {
		return strings.Contains(s, "web-0 (uid "+string(web0.UID)+") runs with "+ip+",")
	})
	refused := c.refused(context.Background())
	dst := refusedDst.FindStringSubmatch(refused)
	if !free || dst == nil || dst[1] != ip {
		c.t.Fatalf("the control did not show the incident: web-0 on %s runs with %s; seen %v; refused %q", web0.Spec.NodeName, ip, seen, refused)
	}
	c.t.Logf("control: %s; %s", seen[0], refused)
}

// waitTornDown waits until n's containerd has torn the network of the
// web-0 sandbox of uid down more than after times.
func (c *cluster) waitTornDown(n *kubenode.Node, uid types.UID, after int) {
	c.t.Helper()
	for deadline := time.Now().Add(100 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		got := c.teardowns(n, uid)
		if got[0]+got[1] > after {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: web-0 (uid %s) torn down %d times, want more than %d", n.Name, uid, got[0]+got[1], after)
		}
	}
}

// Scenario 4 of issue 34: safe-ipam's DaemonSet is rolled to a new image on
// the three nodes, then uninstalled as docs/install.md says, while a
// Deployment's pods, spread over the three, are deleted and recreated all
// along. No pod start fails and no pod loses or shares its address; after
// the uninstall nothing of safe-ipam is in etcd, every node's CNI dirs are
// as Calico left them, and doctor says not installed on each.
func TestRolloutAndUninstallAcrossNodes(t *testing.T) { rolloutAndUninstall(t, false) }

// TestRolloutAndUninstallAcrossNodesOnKDD is the same on Calico's
// Kubernetes datastore (issue 45): after the uninstall no node's file
// store holds a record, no AddressClaim is left (each forgotten record
// released its claims), and deleting deploy/safe-ipam-claims.yaml, as
// docs/install.md says, removes the rest, the sweeps' Lease with it.
func TestRolloutAndUninstallAcrossNodesOnKDD(t *testing.T) { rolloutAndUninstall(t, true) }

func rolloutAndUninstall(t *testing.T, kdd bool) {
	t.Parallel()
	ctx := testContext(t, 8*time.Minute)
	c := newClusterOn(t, false, threeNodes, partitionGrace, kdd)
	before := map[string]map[string]string{}
	for _, n := range c.nodes {
		before[n.Name] = c.cniFilesOn(n)
	}
	c.installSafeIPAM(ctx)
	c.createDeployment(ctx, "churn", 6)
	c.requireOnEveryNode(ctx, "app=churn")
	if kdd && c.claimCount(ctx) == 0 {
		t.Fatal("the pods running with safe-ipam made no AddressClaim")
	}
	w := c.watch(ctx, "default")
	stop := c.churn(ctx, "app=churn")
	c.upgrade(ctx)
	start := time.Now()
	c.waitRollout(ctx, "safe-ipam")
	t.Logf("rolled out on %d nodes in %s", len(c.nodes), time.Since(start).Round(time.Second))
	c.uninstall(ctx)
	churned := stop()
	t.Logf("pods deleted and recreated during the rollout and the uninstall: %d", churned)
	if err := c.node.WaitPodsReady(ctx, "default", "app=churn"); err != nil {
		t.Fatal(err)
	}
	w.stop()
	c.requireHealthy(ctx, w)
	if keys := c.safeIPAMKeys(ctx); len(keys) > 0 {
		t.Errorf("safe-ipam's keys left in etcd after the uninstall: %v", keys)
	}
	if kdd {
		c.requireNoClaims(ctx)
	}
	for _, n := range c.nodes {
		if after := c.cniFilesOn(n); !maps.Equal(before[n.Name], after) {
			t.Errorf("%s's CNI dirs after uninstall:\n%v\nbefore install:\n%v", n.Name, after, before[n.Name])
		}
		if code, out := c.adminOn(ctx, n, "doctor"); code != 1 {
			t.Errorf("doctor on %s exits %d after uninstall, want 1 (not installed):\n%s", n.Name, code, out)
		}
	}
	if err := c.kube.AppsV1().Deployments("default").Delete(ctx, "churn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.releaseAll(ctx)
}

// requireOnEveryNode fails the test unless the pods selector matches run
// on every node.
func (c *cluster) requireOnEveryNode(ctx context.Context, selector string) {
	c.t.Helper()
	list, err := c.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		c.t.Fatal(err)
	}
	on := map[string]int{}
	for _, p := range list.Items {
		on[p.Spec.NodeName]++
	}
	if len(on) != len(c.nodes) {
		c.t.Fatalf("pods %q run on %v, want every one of the %d nodes", selector, on, len(c.nodes))
	}
}

// uninstall removes safe-ipam as docs/install.md says: delete the
// DaemonSet, apply the uninstall DaemonSet, wait for it, delete it.
func (c *cluster) uninstall(ctx context.Context) {
	c.t.Helper()
	if err := c.node.API.Delete(manifest); err != nil {
		c.t.Fatal(err)
	}
	c.waitNoPods(ctx, "kube-system", "k8s-app=safe-ipam")
	if err := c.node.API.Apply(c.manifestFor(uninstallManifest)); err != nil {
		c.t.Fatal(err)
	}
	c.waitRollout(ctx, "safe-ipam-uninstall")
	if err := c.node.API.Delete(uninstallManifest); err != nil {
		c.t.Fatal(err)
	}
	c.waitNoPods(ctx, "kube-system", "k8s-app=safe-ipam-uninstall")
}

// safeIPAMKeys are the keys under safe-ipam's prefix in Calico's etcd.
func (c *cluster) safeIPAMKeys(ctx context.Context) []string {
	return slices.Sorted(maps.Keys(c.safeIPAMData(ctx)))
}

// safeIPAMData is every key under safe-ipam's prefix in Calico's etcd,
// with its value.
func (c *cluster) safeIPAMData(ctx context.Context) map[string]string {
	c.t.Helper()
	if c.kdd {
		return c.fileStoreData()
	}
	resp, err := c.calico.Etcd.Get(ctx, config.DefaultEtcdPrefix+"/", clientv3.WithPrefix())
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// sweepTTL is the elected sweeper's lease in gc periods (ipam/admin/gc's
// sweepTTL): a leader that dies is replaced within it, and the next
// round of another gc.
const sweepTTL = 3

// Scenario 5 of issue 34, the collector dies: the node whose gc holds the
// cluster's dead-node sweep (ipam/admin/gc/sweeper.go) is killed, every process
// at once, so its lease is never revoked; another node's gc takes the
// sweep over within the lease and one period.
func TestCollectorDies(t *testing.T) { collectorDies(t, false) }

// TestCollectorDiesOnKDD is TestCollectorDies on Calico's Kubernetes
// datastore (issue 45): the gc loops elect the sweeper of the claims
// through the sweeps' Lease, whose holder, killed, never gives it up;
// another node's gc takes it over once it has seen it unrenewed for its
// duration (3 periods), at its next round.
func TestCollectorDiesOnKDD(t *testing.T) { collectorDies(t, true) }

func collectorDies(t *testing.T, kdd bool) {
	t.Parallel()
	ctx := testContext(t, 6*time.Minute)
	c := newClusterOn(t, false, threeNodes, partitionGrace, kdd)
	c.gcEvery = 10 * time.Second
	c.installSafeIPAM(ctx)
	leader := c.waitSweeper(ctx, "", time.Minute)
	dead := c.nodeNamed(leader)
	start := time.Now()
	c.kill(dead)
	bound := (sweepTTL+1)*c.gcEvery + 5*time.Second
	next := c.waitSweeper(ctx, leader, 2*bound)
	took := time.Since(start)
	t.Logf("the sweep moved from %s (killed) to %s in %s (bound %s: the lease of %d periods, and one period)", leader, next, took.Round(time.Second), bound, sweepTTL)
	if took > bound {
		t.Errorf("%s took the sweep over %s after %s was killed, later than %s", next, took.Round(time.Second), leader, bound)
	}
}

// waitSweeper waits until a node other than not leads the dead-node
// sweeps, and returns it: the oldest key of the election in etcd, or the
// holder of the sweeps' Lease on Calico's Kubernetes datastore.
func (c *cluster) waitSweeper(ctx context.Context, not string, d time.Duration) string {
	c.t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		if leader := c.sweeper(ctx); leader != "" && leader != not {
			return leader
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no node other than %q leads the sweeps after %s", not, d)
		}
	}
}

// nodeNamed is the node of that name; the test fails if there is none.
func (c *cluster) nodeNamed(name string) *kubenode.Node {
	c.t.Helper()
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	c.t.Fatalf("no node %q", name)
	return nil
}

// nodeOf is the node the pod is bound to; the first node if none.
func (c *cluster) nodeOf(p *corev1.Pod) *kubenode.Node {
	for _, n := range c.nodes {
		if n.Name == p.Spec.NodeName {
			return n
		}
	}
	return c.node
}

// pod reads the pod of the default namespace.
func (c *cluster) pod(ctx context.Context, name string) *corev1.Pod {
	c.t.Helper()
	p, err := c.kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// podOn is a waiting pod bound to the node, past the scheduler.
func podOn(name, node string) *corev1.Pod {
	p := pod(name, nil)
	p.Spec.NodeName = node
	return p
}

// onNodes keeps the pods of spec to the nodes, the first preferred.
func onNodes(spec corev1.PodSpec, nodes ...string) corev1.PodSpec {
	term := func(names ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: names}}}
	}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term(nodes...)}},
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: term(nodes[0])}},
	}}
	return spec
}

// fileStoreData is safeIPAMData where the records are in each node's file
// store (Calico's Kubernetes datastore), keyed as the etcd store's are
// read: /<node>/records/<attachment>, and /<node>/quarantine/<attachment>
// for a record that keeps quarantines or a mark of one kept for another
// node's holder.
func (c *cluster) fileStoreData() map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for _, n := range c.livingNodes() {
		dir := n.Path(config.DefaultStoreDir)
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			continue
		}
		fs, err := filestore.Open(dir)
		if err != nil {
			c.t.Fatal(err)
		}
		recs, err := fs.List(context.Background(), network)
		if err != nil {
			c.t.Fatal(err)
		}
		for _, r := range recs {
			out[fileStoreKey(n, "records", r.Attachment)] = fmt.Sprint(r.State, r.IPs)
			if len(r.Quarantined) > 0 {
				out[fileStoreKey(n, "quarantine", r.Attachment)] = fmt.Sprint(r.Quarantined)
			}
		}
		marks, err := fs.RemoteQuarantines(context.Background(), network)
		if err != nil {
			c.t.Fatal(err)
		}
		for att, m := range marks {
			out[fileStoreKey(n, "quarantine", att)] = m.Claim
		}
	}
	return out
}

// sweeper is the node that leads the dead-node sweeps now ("" for none).
func (c *cluster) sweeper(ctx context.Context) string {
	c.t.Helper()
	if c.kdd {
		l, err := c.kube.CoordinationV1().Leases(claims.LeaseNamespace).Get(ctx, claims.LeaseName(network), metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if l.Spec.HolderIdentity == nil {
			return ""
		}
		node, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		return node
	}
	resp, err := c.calico.Etcd.Get(ctx, config.DefaultEtcdPrefix+"/sweeps/"+network+"/leader/", clientv3.WithFirstCreate()...)
	if err != nil {
		c.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// requireNoClaims fails the test if an AddressClaim is left after the
// uninstall, then deletes deploy/safe-ipam-claims.yaml as docs/install.md
// says, and waits until its objects (the sweeps' Lease among them) are
// gone.
func (c *cluster) requireNoClaims(ctx context.Context) {
	c.t.Helper()
	if n := c.claimCount(ctx); n > 0 {
		c.t.Errorf("%d AddressClaims left after the uninstall", n)
	}
	if err := c.node.API.Delete(claimsManifest); err != nil {
		c.t.Fatal(err)
	}
	leases := c.kube.CoordinationV1().Leases(claims.LeaseNamespace)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		_, err := leases.Get(ctx, claims.LeaseName(network), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the sweeps' Lease is still there a minute after deploy/safe-ipam-claims.yaml was deleted: %v", err)
		}
	}
}

// claimCount is how many AddressClaims there are (Calico's Kubernetes
// datastore); none once their CRD is deleted.
func (c *cluster) claimCount(ctx context.Context) int {
	c.t.Helper()
	dyn, err := dynamic.NewForConfig(c.node.API.Config())
	if err != nil {
		c.t.Fatal(err)
	}
	list, err := dyn.Resource(schema.GroupVersionResource{Group: claims.Group, Version: claims.Version, Resource: claims.Resource}).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return 0
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return len(list.Items)
}

// fileStoreKey is fileStoreData's key of what node n's file store holds
// of att: /<node>/<what>/<attachment>.
func fileStoreKey(n *kubenode.Node, what string, att record.Attachment) string {
	return path.Join("/", n.Name, what, att.String())
}
