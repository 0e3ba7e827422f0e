package cluster

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubenode"
	"github.com/safe-ipam/safe-ipam/e2e/harness/releaser"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// leakGrace is the outside releaser's leak grace period (15 minutes in
// Calico), shortened for the tests.
const leakGrace = 10 * time.Second

// gcGrace is the deployed config's gcGracePeriod (the default): gc keeps
// any record written more recently.
const gcGrace = time.Minute

// Scenario 2 of issue 34, node death: node C stops for good and its Node
// is deleted. Calico's pool is four blocks: A's, B's, C's, and one a host
// outside Kubernetes holds. The outside releaser (Calico's kube-controllers) frees C's
// addresses once the pod GC has deleted its pods, and deletes Calico's
// Node; safe-ipam's dead-node collection, in the elected gc, releases C's
// records within its stated period (a sweep to find the node gone, one
// --dead-node-grace later to release, and the lease and a period more when
// C's gc led). Then pods on A are handed C's old addresses and start: no
// refused start, no address shared, nothing left once the pods are gone.
// No control: Calico alone has no records to release.
func TestNodeDeath(t *testing.T) { nodeDeath(t, false) }

// TestNodeDeathOnKDD is TestNodeDeath on Calico's Kubernetes datastore
// (issue 45): C's records die with its file store, but its claims stay in
// the API server, and would fence C's old addresses on A for ever; the
// elected gc sweeps them within the same bound.
func TestNodeDeathOnKDD(t *testing.T) { nodeDeath(t, true) }

func nodeDeath(t *testing.T, kdd bool) {
	t.Parallel()
	ctx := testContext(t, 8*time.Minute)
	c := newClusterOn(t, false, threeNodes, partitionGrace, kdd)
	c.registerNodes(ctx)
	c.gcEvery = 10 * time.Second
	c.installSafeIPAM(ctx)
	c.startReleaser(0)
	a, dead := c.nodes[0], c.nodes[2]
	c.fourBlocks(ctx)
	for i, n := range c.nodes {
		c.waitPodsStarted(ctx, c.createPodsOn(ctx, n, n.Name, 1+i/2))
	}
	outside := c.claimLastBlock(ctx)
	doomed := c.addrsOn(ctx, dead.Name)
	if kdd {
		// What the sweep must release: a claim of each of C's addresses.
		for _, ip := range doomed {
			if cl := c.claimOn(ctx, ip); cl == nil || !strings.Contains(fmt.Sprint(cl.Object["spec"]), "node:"+dead.Name) {
				t.Fatalf("%s's %s has no claim of %s: %v", dead.Name, ip, dead.Name, cl)
			}
		}
	}
	c.writeEndpoints(ctx, dead.Name)
	leader := c.waitSweeper(ctx, "", time.Minute)
	w := c.watch(ctx, "default")
	c.kill(dead)
	if err := dead.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	c.waitCalicoForgets(ctx, dead.Name, doomed)
	freed := time.Now()
	t.Logf("the releaser freed %s's addresses %v, its block and its Calico Node %s after its Node was deleted", dead.Name, doomed, freed.Sub(deleted).Round(time.Second))
	bound := 2*c.gcEvery + 2*c.gcEvery + 5*time.Second // a sweep finds it gone, one --dead-node-grace later releases
	if leader == dead.Name {
		bound += (sweepTTL + 1) * c.gcEvery
	}
	c.waitForgotten(ctx, dead.Name, bound)
	t.Logf("safe-ipam's dead-node collection released %s's records %s after Calico forgot it (bound %s; %s led the sweeps)", dead.Name, time.Since(freed).Round(time.Second), bound, leader)
	// A's block is full after this many, and the rest come from C's old
	// block, the only free one.
	names := c.createPodsOn(ctx, a, "after", testbed.BlockAddrs+len(doomed)-1)
	c.waitPodsStarted(ctx, names)
	handed := c.addrsOn(ctx, a.Name)
	for _, ip := range doomed {
		if !slices.Contains(handed, ip) {
			t.Errorf("%s's old %s was not handed to a pod on %s: %v", dead.Name, ip, a.Name, handed)
		}
	}
	w.stop()
	c.requireHealthy(ctx, w)
	if _, err := outside.ReleaseHandle(ctx, outsideHandle); err != nil {
		t.Fatal(err)
	}
	c.releaseAll(ctx)
}

// outsideHandle holds the address of a host outside Kubernetes.
const outsideHandle = "outside-host"

// fourBlocks makes Calico's pool four blocks.
func (c *cluster) fourBlocks(ctx context.Context) {
	c.t.Helper()
	if c.kdd {
		if err := c.calicoObjects("ippools").Delete(ctx, testbed.PoolName, metav1.DeleteOptions{}); err != nil {
			c.t.Fatal(err)
		}
		if err := calicosim.SeedKubeIPPool(ctx, c.node.API.Config(), testbed.PoolName, "10.244.0.0/27", testbed.BlockSize); err != nil {
			c.t.Fatal(err)
		}
		return
	}
	if err := calicosim.SeedIPPool(ctx, c.calico.Etcd, testbed.PoolName, "10.244.0.0/27", testbed.BlockSize); err != nil {
		c.t.Fatal(err)
	}
}

// claimLastBlock gives an address to a host outside Kubernetes (a Calico
// Node with no orchRefs, which the releaser leaves alone), which claims
// the four-block pool's last free block: a block freed later is then the
// only one to claim, with Calico's pseudo-random choice as with the
// simulator's lowest first. It returns that host's allocator.
func (c *cluster) claimLastBlock(ctx context.Context) *calicosim.Allocator {
	c.t.Helper()
	if c.kdd {
		// On KDD Calico's Nodes are Kubernetes Nodes: one without a
		// kubelet, which the releaser leaves alone while it exists.
		if err := calicosim.SeedKubeNode(ctx, c.node.API.Config(), "outside"); err != nil {
			c.t.Fatal(err)
		}
	} else if err := calicosim.SeedNode(ctx, c.calico.Etcd, "outside"); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.calico.SeedLegacyHandle(ctx, "outside", outsideHandle); err != nil {
		c.t.Fatal(err)
	}
	if c.kdd {
		dyn, err := dynamic.NewForConfig(c.node.API.Config())
		if err != nil {
			c.t.Fatal(err)
		}
		return &calicosim.Allocator{Kube: dyn, Node: "outside"}
	}
	return &calicosim.Allocator{Client: c.calico.Etcd, Node: "outside"}
}

// claimOn is the AddressClaim on ip (nil: none).
func (c *cluster) claimOn(ctx context.Context, ip netip.Addr) *unstructured.Unstructured {
	c.t.Helper()
	dyn, err := dynamic.NewForConfig(c.node.API.Config())
	if err != nil {
		c.t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: claims.Group, Version: claims.Version, Resource: claims.Resource}
	obj, err := dyn.Resource(gvr).Get(ctx, claims.Name(network, ip), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return obj
}

// calicoObjects is the client of Calico's crd.projectcalico.org/v1
// objects of plural (Calico's Kubernetes datastore).
func (c *cluster) calicoObjects(plural string) dynamic.NamespaceableResourceInterface {
	c.t.Helper()
	dyn, err := dynamic.NewForConfig(c.node.API.Config())
	if err != nil {
		c.t.Fatal(err)
	}
	return dyn.Resource(schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: plural})
}

// waitForgotten waits up to d until safe-ipam holds nothing of node: no
// key in etcd names it, or, on Calico's Kubernetes datastore (where its
// records died with its file store), no AddressClaim is its.
func (c *cluster) waitForgotten(ctx context.Context, node string, d time.Duration) {
	c.t.Helper()
	if !c.kdd {
		c.waitNoKeysOf(ctx, node, d)
		return
	}
	dyn, err := dynamic.NewForConfig(c.node.API.Config())
	if err != nil {
		c.t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: claims.Group, Version: claims.Version, Resource: claims.Resource}
	for deadline := time.Now().Add(d); ; time.Sleep(500 * time.Millisecond) {
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: claims.NodeLabel + "=" + node})
		if err != nil {
			c.t.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %s, %d AddressClaims of %s are still there", d, len(list.Items), node)
		}
	}
}

// Scenario 3 of issue 34, outside release across nodes: node A's Calico
// node name is stale (B's, as on the re-imaged node of Calico issue 12257),
// so its pod's allocation names node B; the releaser takes it for a
// rescheduled pod's leak and frees it once its leak grace period has
// passed, while the pod runs on A. Pods then start on B until Calico hands
// B the address.
//
// Control (Calico alone): a running duplicate across nodes (no route
// clash: they are different hosts). With safe-ipam's etcd store: the ADD
// given the address is fenced (its only refused start), the duplicate
// never runs, and the quarantine is released when A's pod goes; nothing
// is left. Both machines' records are kept under B's Calico name: each
// node's gc, run every few seconds, keeps the other machine's records
// (written by another host) instead of judging them by its own runtime,
// which would release the other's running pods.
func TestOutsideReleaseAcrossNodes(t *testing.T) { outsideReleaseAcrossNodes(t, false) }

// TestOutsideReleaseAcrossNodesOnKDD is TestOutsideReleaseAcrossNodes on
// Calico's Kubernetes datastore (issue 45), where each node keeps its
// records in its own file store: the control runs the duplicate, as
// Calico alone; with safe-ipam and deploy/safe-ipam-claims.yaml, A's
// pod's claim (under B's Calico name, by host A) fences B's ADD, and B
// keeps the allocation quarantined for that claim until A's pod goes and
// B's gc found the claim gone twice, --quarantine-grace apart. Each
// node's gc reads its own file store only, so neither warns of the other
// host; neither takes the other machine's claims for its own.
func TestOutsideReleaseAcrossNodesOnKDD(t *testing.T) { outsideReleaseAcrossNodes(t, true) }

func outsideReleaseAcrossNodes(t *testing.T, kdd bool) {
	t.Parallel()
	controlAndSafe(t, func(t *testing.T, safe bool) {
		ctx := testContext(t, 8*time.Minute)
		c := newClusterOn(t, false, threeNodes, partitionGrace, kdd)
		c.gcEvery = 10 * time.Second
		a, b := c.nodes[0], c.nodes[1]
		c.calicoNames = map[string]string{a.Name: b.Name}
		c.installCalico(a)
		c.registerNodes(ctx)
		if safe {
			c.installSafeIPAM(ctx)
		}
		// Issue 47: on Calico alone, the continuous check reports each
		// step of the incident within one of its periods.
		detecting := !safe && kdd
		if detecting {
			c.startDetect(ctx)
			// A pod whose allocation stays: a datastore holding no
			// allocation at all beside pods of Calico's is never judged.
			c.waitPodsStarted(ctx, c.createPodsOn(ctx, c.nodes[2], "bystander", 1))
		}
		c.startReleaser(leakGrace)
		c.waitPodsStarted(ctx, c.createPodsOn(ctx, a, "holder", 1))
		held := c.addrsOn(ctx, a.Name)[0]
		w := c.watch(ctx, "default")
		start := time.Now()
		c.waitCalicoForgets(ctx, "", []netip.Addr{held})
		t.Logf("the releaser freed %s of %s's running pod %s after it started", held, a.Name, time.Since(start).Round(time.Second))
		if detecting {
			c.waitDetected(ctx, detect.EarlyRelease, "holder-1", time.Now())
		}
		for i := 1; i <= 2*testbed.BlockAddrs && c.handedOn(ctx, w, held) == ""; i++ {
			name := fmt.Sprintf("%s-%d", b.Name, i)
			if _, err := c.kube.CoreV1().Pods("default").Create(ctx, podOn(name, b.Name), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			c.waitStarted(ctx, name, time.Minute)
		}
		handed := c.handedOn(ctx, w, held)
		t.Logf("%s handed on: %s", held, handed)
		duplicate := strings.Contains(handed, "both run with")
		if !safe {
			if !duplicate {
				t.Fatalf("the control did not run a duplicate of %s across nodes: %q; seen %v", held, handed, w.seen())
			}
			if detecting {
				c.waitDetected(ctx, detect.SharedAddress, "holder-1", time.Now())
				c.waitDetected(ctx, detect.AnnotationMismatch, "holder-1", c.plantAnnotationMismatch(ctx, "holder-1"))
			}
			return
		}
		if duplicate || handed == "" {
			t.Fatalf("with safe-ipam, %s was not fenced: %q", held, handed)
		}
		// The fenced pod starts in its next sandbox, with another address.
		fenced := strings.SplitN(handed, ":", 2)[0]
		c.waitRunning(ctx, fenced)
		if ip := c.pod(ctx, fenced).Status.PodIP; ip == held.String() {
			t.Errorf("%s runs with %s, which %s holds", fenced, ip, a.Name)
		}
		var claim *unstructured.Unstructured
		if kdd {
			claim = c.claimOn(ctx, held) // A's pod's, which fenced B
		}
		// Every node's gc judges every shared record, past gcGracePeriod,
		// at least twice.
		time.Sleep(gcGrace + 2*c.gcEvery + 5*time.Second)
		if kdd {
			// Neither gc took the other machine's claim for its own (a
			// claim, like a record, judged past its grace, twice): A's
			// pod's claim stands as it was, and B keeps the quarantine.
			if now := c.claimOn(ctx, held); now == nil || now.GetUID() != claim.GetUID() {
				t.Fatalf("the claim on %s of %s's running pod is gone or replaced after both gc ran: %v", held, a.Name, now)
			}
			if !slices.ContainsFunc(slices.Collect(maps.Keys(c.safeIPAMData(ctx))), func(k string) bool { return strings.HasPrefix(k, path.Join("/", b.Name, "quarantine")) }) {
				t.Fatalf("%s keeps no quarantine of %s for %s's claim: %v", b.Name, held, a.Name, c.safeIPAMData(ctx))
			}
		}
		// Each gc names the other machine, and only it: the hosts differ,
		// and gc's host is its own node's.
		for _, n := range [][2]*kubenode.Node{{a, b}, {b, a}} {
			if want := "WARNING: host(s) " + n[1].Name + " wrote records"; !kdd && !strings.Contains(gcLog(t, n[0]), want) {
				t.Errorf("%s's gc did not say %q", n[0].Name, want)
			}
		}
		w.stop()
		c.requireOnlyFenced(ctx, w, held)
		if err := c.kube.CoreV1().Pods("default").Delete(ctx, "holder-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		bound := time.Minute
		if kdd {
			// The quarantine goes once B's gc found the claim gone twice,
			// --quarantine-grace (2 periods) apart.
			bound += 4 * c.gcEvery
		}
		c.waitNoKeysOf(ctx, "quarantine", bound)
		c.releaseAll(ctx)
	})
}

// writeEndpoints writes Calico's WorkloadEndpoint of each running pod on
// node, as Calico's main plugin does on ADD (the simulator does not): the
// releaser, deleting a node's Calico Node, frees the addresses its
// endpoints name, and its blocks with them once they are empty, as
// Calico's Nodes().Delete does.
func (c *cluster) writeEndpoints(ctx context.Context, node string) {
	c.t.Helper()
	if prepared.realCalico || c.kdd {
		return // Calico's own plugin wrote them; KDD has none (kube-controllers reads the pods)
	}
	pods, err := c.runningPods(ctx, "default")
	if err != nil {
		c.t.Fatal(err)
	}
	for _, p := range pods {
		if p.Spec.NodeName != node {
			continue
		}
		name := strings.ReplaceAll(node, "-", "--") + "-k8s-" + strings.ReplaceAll(p.Name, "-", "--") + "-eth0"
		wep := fmt.Sprintf(`{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":%q,"namespace":%q},"spec":{"orchestrator":"k8s","node":%q,"pod":%q,"endpoint":"eth0","ipNetworks":[%q]}}`,
			name, p.Namespace, node, p.Name, p.Status.PodIP+"/32")
		if _, err := c.calico.Etcd.Put(ctx, "/calico/resources/v3/projectcalico.org/workloadendpoints/"+p.Namespace+"/"+name, wep); err != nil {
			c.t.Fatal(err)
		}
	}
}

// waitRunning waits until the pod runs with an address, whatever sandboxes
// were refused first.
func (c *cluster) waitRunning(ctx context.Context, name string) {
	c.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if p := c.pod(ctx, name); p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s does not run", name)
		}
	}
}

// handedOn is how the address was handed on, "" while it was not: a
// running duplicate the checker saw, or a start safe-ipam fenced.
func (c *cluster) handedOn(ctx context.Context, w *watcher, ip netip.Addr) string {
	for _, s := range w.seen() {
		if strings.Contains(s, "both run with "+ip.String()) {
			return s
		}
	}
	for _, f := range c.sandboxFailures(ctx, "default") {
		if strings.Contains(f, "gave "+ip.String()+"/") {
			return f
		}
	}
	return ""
}

// requireOnlyFenced fails the test on a duplicate the checker saw and on a
// refused start other than the fence's for ip. That the running pod's ip
// was free in Calico's data is the releaser's doing, which safe-ipam
// cannot undo.
func (c *cluster) requireOnlyFenced(ctx context.Context, w *watcher, ip netip.Addr) {
	c.t.Helper()
	for _, s := range w.seen() {
		if !strings.Contains(s, " runs with "+ip.String()+", which is free") {
			c.t.Errorf("while it ran: %s", s)
		}
	}
	for _, f := range c.sandboxFailures(ctx, "default") {
		if !strings.Contains(f, "gave "+ip.String()+"/") {
			c.t.Errorf("a refused start the fence did not make: %s", f)
		}
	}
}

// registerNodes writes Calico's Nodes as calico-node registers them on
// Kubernetes nodes (spec.orchRefs naming the Kubernetes node), which is
// how kube-controllers maps Calico's nodes to Kubernetes'.
func (c *cluster) registerNodes(ctx context.Context) {
	c.t.Helper()
	if c.kdd {
		return // Calico's Nodes are the Kubernetes Nodes
	}
	for _, n := range c.nodes {
		if err := releaser.SeedNode(ctx, c.calico.Etcd, n.Name, n.Name); err != nil {
			c.t.Fatal(err)
		}
	}
}

// startReleaser starts the outside releaser (the simulator, or
// $CALICO_KUBE_CONTROLLERS) on the cluster's etcd datastore.
func (c *cluster) startReleaser(grace time.Duration) {
	c.t.Helper()
	opt := releaser.Options{Kubeconfig: c.node.API.Kubeconfig, Datastore: releaser.Etcd,
		EtcdEndpoints: []string{c.node.EtcdEndpoint()}, LeakGrace: grace, Dir: c.t.TempDir()}
	if c.kdd {
		opt.Datastore, opt.EtcdEndpoints = releaser.Kubernetes, nil
	}
	releaser.Start(c.t, opt)
}

// createPodsOn creates n pods named prefix-1... bound to node, and
// returns their names.
func (c *cluster) createPodsOn(ctx context.Context, node *kubenode.Node, prefix string, n int) []string {
	c.t.Helper()
	var names []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := c.kube.CoreV1().Pods("default").Create(ctx, podOn(name, node.Name), metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// addrsOn are the addresses of the running pods on the node.
func (c *cluster) addrsOn(ctx context.Context, node string) []netip.Addr {
	c.t.Helper()
	pods, err := c.runningPods(ctx, "default")
	if err != nil {
		c.t.Fatal(err)
	}
	var out []netip.Addr
	for _, p := range pods {
		if p.Spec.NodeName == node {
			out = append(out, netip.MustParseAddr(p.Status.PodIP))
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// waitCalicoForgets waits until Calico's data holds none of addrs and, if
// node is not "", no block affine to the node and no Calico Node of it.
func (c *cluster) waitCalicoForgets(ctx context.Context, node string, addrs []netip.Addr) {
	c.t.Helper()
	var last string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		snap, err := c.calico.Calico(ctx)
		if err != nil {
			c.t.Fatal(err)
		}
		last = ""
		for _, ip := range addrs {
			if a, ok := snap.Lookup(ip); ok {
				last += fmt.Sprintf(" %s held by %s;", ip, a.Handle)
			}
		}
		for _, b := range snap.Blocks {
			if owner, ok := b.Block.AffinityNode(); ok && node != "" && owner == node {
				last += fmt.Sprintf(" block %s affine to %s;", b.Block.CIDR, node)
			}
		}
		if node != "" && c.calicoNodeExists(ctx, node) {
			last += " Calico Node " + node + ";"
		}
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("Calico's data still has:%s", last)
		}
	}
}

// calicoNodeExists says whether Calico's Node name is in etcd.
func (c *cluster) calicoNodeExists(ctx context.Context, name string) bool {
	c.t.Helper()
	if c.kdd {
		_, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			c.t.Fatal(err)
		}
		return err == nil
	}
	resp, err := c.calico.Etcd.Get(ctx, "/calico/resources/v3/projectcalico.org/nodes/"+name)
	if err != nil {
		c.t.Fatal(err)
	}
	return len(resp.Kvs) > 0
}

// waitNoKeysOf waits up to d until no key of safe-ipam's in etcd, the
// sweeps' own aside, has the path segment part (a node's name, or
// "quarantine") in it or in its value (the address index names records).
func (c *cluster) waitNoKeysOf(ctx context.Context, part string, d time.Duration) {
	c.t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(500 * time.Millisecond) {
		var left []string
		for k, v := range c.safeIPAMData(ctx) {
			if (strings.Contains(k+"/", "/"+part+"/") || strings.Contains(v, "/"+part+"/")) && !strings.Contains(k, "/sweeps/") {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %s, safe-ipam's keys of %s are still there: %v", d, part, left)
		}
	}
}

// gcLog is the output of the gc containers that ran on node n.
func gcLog(t *testing.T, n *kubenode.Node) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(n.Dir, "var-log", "pods", "kube-system_safe-ipam-*", "gc", "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(data)
	}
	return out.String()
}
