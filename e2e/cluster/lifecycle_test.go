package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubenode"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Scenario 2 of issue 23: calico-node starts again (its installer
// rewrites calico-ipam and the conflist) under the running DaemonSet,
// three times, while pods start, in deploy/'s own mode (own-conflist:
// nothing to put back) and in takeover (the watch container puts
// safe-ipam back). The window is measured, and no pod start in it is
// lost, refused or duplicated.
func TestCalicoNodeRestarts(t *testing.T) {
	for _, mode := range []string{install.ModeOwnConflist, install.ModeTakeover} {
		t.Run(mode, func(t *testing.T) { restartsWithPodStarts(t, mode) })
	}
}

func restartsWithPodStarts(t *testing.T, mode string) {
	ctx := testContext(t, 5*time.Minute)
	c := newCluster(t, false)
	c.installSafeIPAMIn(ctx, mode)
	w := c.watch(ctx, "default")
	var windows []time.Duration
	for i := 1; i <= 3; i++ {
		start := time.Now()
		c.calicoNodeStart(c.node)
		names := c.createPods(ctx, fmt.Sprintf("restart%d", i), 2)
		windows = append(windows, c.waitProtected(ctx, start))
		c.waitPodsStarted(ctx, names)
	}
	// Takeover: the window, from Calico's writes until the watch's
	// rename. Own-conflist: only how soon the check saw it (its config
	// never stops routing through safe-ipam: TestCalicoNodeRestartsWindow
	// counts the calls).
	t.Logf("%s: from each calico-node start (and two pods created) until the node was seen running safe-ipam: %v", mode, windows)
	c.waitRollout(ctx, "safe-ipam")
	// What docs/troubleshooting.md tells an operator to run on this node.
	if codes := c.troubleshootOn(ctx, c.node); !maps.Equal(codes, map[string]int32{"doctor": 0, "audit": 0}) {
		t.Errorf("docs/troubleshooting.md's doctor and audit in the node's pod: exit codes %v, want 0", codes)
	}
	w.stop()
	c.requireHealthy(ctx, w)
	c.releaseAll(ctx)
}

// Scenario 3 of issue 23: the DaemonSet is rolled to a new image tag while
// a Deployment's pods are deleted and recreated all along; no pod start
// fails and none loses or shares its address. The DaemonSet before runs
// in takeover, the manifests' mode before issue 46, and the new one is
// deploy/'s own (own-conflist), as an operator's upgrade applies it: the
// node switches, Calico's calico-ipam back in place.
func TestDaemonSetUpgrade(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	c := newCluster(t, false)
	c.installSafeIPAMIn(ctx, install.ModeTakeover)
	c.createDeployment(ctx, "churn", 3)
	w := c.watch(ctx, "default")
	stop := c.churn(ctx, "app=churn")
	c.mode = install.ModeOwnConflist
	if err := c.node.API.Apply(manifest); err != nil {
		t.Fatal(err)
	}
	c.upgrade(ctx)
	c.waitRollout(ctx, "safe-ipam")
	c.waitProtected(ctx, time.Now())
	if taken, err := cninode.IsSafeIPAM(c.node.Path(filepath.Join(binDir, "calico-ipam"))); err != nil || taken {
		t.Errorf("after the switch to own-conflist mode, calico-ipam is safe-ipam %v (%v); want Calico's back", taken, err)
	}
	// Churn a while longer under the new pod.
	time.Sleep(5 * time.Second)
	churned := stop()
	t.Logf("pods deleted and recreated during the upgrade: %d", churned)
	pods, err := c.kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=safe-ipam"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.Containers[0].Image != upgradeImage {
			t.Errorf("safe-ipam pod %s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, upgradeImage)
		}
	}
	if err := c.node.WaitPodsReady(ctx, "default", "app=churn"); err != nil {
		t.Fatal(err)
	}
	w.stop()
	c.requireHealthy(ctx, w)
	if err := c.kube.AppsV1().Deployments("default").Delete(ctx, "churn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.releaseAll(ctx)
}

// Scenario 4 of issue 23: the kubelet, then containerd, restart with pods
// running. The pods keep their addresses, nothing is lost or duplicated,
// and `safe-ipam audit` finds nothing.
func TestRuntimeRestarts(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	c := newCluster(t, false)
	c.installSafeIPAM(ctx)
	names := c.createPods(ctx, "steady", 3)
	c.waitPodsStarted(ctx, names)
	before := c.podIPs(ctx)
	w := c.watch(ctx, "default")
	restarts := []struct {
		what string
		do   func(context.Context) error
	}{{"kubelet", c.node.RestartKubelet}, {"containerd", c.node.RestartContainerd}}
	for _, r := range restarts {
		if err := r.do(ctx); err != nil {
			t.Fatalf("restarting %s: %v", r.what, err)
		}
		if err := c.node.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.node.WaitPodsReady(ctx, "default", ""); err != nil {
			t.Fatalf("after the %s restart: %v", r.what, err)
		}
		if after := c.podIPs(ctx); !maps.Equal(before, after) {
			t.Errorf("after the %s restart the pods' addresses are %v, were %v", r.what, after, before)
		}
		names = append(names, c.createPods(ctx, "after-"+r.what, 1)...)
		c.waitPodsStarted(ctx, names)
		before = c.podIPs(ctx)
	}
	c.waitRollout(ctx, "safe-ipam")
	w.stop()
	c.requireHealthy(ctx, w)
	if code, out := c.admin(ctx, "audit"); code != 0 {
		t.Errorf("audit exits %d after the restarts:\n%s", code, out)
	}
	c.releaseAll(ctx)
}

// Scenario 5 of issue 23: a sandbox is torn down without its CNI DEL (the
// kubelet is stopped, the sandbox removed from containerd behind the CRI,
// containerd restarted, the pod force-deleted). Nothing else would free
// its address: it stays held, and fenced, until the DaemonSet's gc
// container collects it at its next round. The test does not wait the
// 5 minutes of --every: it stops the gc container, whose restart runs a
// round at once, as after a node reboot; the record is older than
// gcGracePeriod (60 s) by then.
func TestMissingDEL(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	c := newCluster(t, false)
	c.installSafeIPAM(ctx)
	names := c.createPods(ctx, "keeper", 1)
	names = append(names, c.createPods(ctx, "orphan", 1)...)
	c.waitPodsStarted(ctx, names)
	added := time.Now()
	ips := c.podIPs(ctx)
	orphan := netip.MustParseAddr(ips["orphan-1"])

	c.node.StopKubelet()
	c.removeBehindCRI(ctx, "orphan-1")
	if err := c.node.RestartContainerd(ctx); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := c.kube.CoreV1().Pods("default").Delete(ctx, "orphan-1", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if err := c.node.StartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.node.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// The control: no DEL came, so the address and the record stay.
	time.Sleep(5 * time.Second)
	if _, held := c.allocations(ctx)[orphan]; !held || !c.holdsRecord(ctx, orphan) {
		t.Fatalf("%s was released without a DEL: Calico %v, safe-ipam %v", orphan, c.allocations(ctx), c.records(ctx))
	}
	time.Sleep(time.Until(added.Add(65 * time.Second)))
	c.stopContainer(ctx, "gc")
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		_, held := c.allocations(ctx)[orphan]
		if !held && !c.holdsRecord(ctx, orphan) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DaemonSet's gc did not collect %s: Calico %v, safe-ipam %v", orphan, c.allocations(ctx), c.records(ctx))
		}
	}
	if keeper := netip.MustParseAddr(ips["keeper-1"]); !c.holdsRecord(ctx, keeper) {
		t.Errorf("gc released the running keeper-1's %s: safe-ipam %v", keeper, c.records(ctx))
	}
	c.waitRollout(ctx, "safe-ipam")
	// The collected address is usable again.
	c.waitPodsStarted(ctx, c.createPods(ctx, "after", 2))
	if v, err := c.violations(ctx, "default"); err != nil || len(v) > 0 {
		t.Errorf("after gc: %v %v", v, err)
	}
	c.releaseAll(ctx)
}

// Scenario 6 of issue 23: safe-ipam is uninstalled from the cluster as
// docs/install.md says (delete the DaemonSet, apply the uninstall
// DaemonSet, wait, delete it). The node's CNI dirs are as Calico left
// them, doctor says not installed, the pods that ran keep their
// addresses, and pods keep starting and stopping.
func TestUninstall(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	c := newCluster(t, false)
	before := c.cniFiles()
	c.installSafeIPAM(ctx)
	names := c.createPods(ctx, "before", 2)
	c.waitPodsStarted(ctx, names)
	c.uninstall(ctx)
	if after := c.cniFiles(); !maps.Equal(before, after) {
		t.Errorf("the node's CNI dirs after uninstall:\n%v\nbefore install:\n%v", after, before)
	}
	if recs := c.records(ctx); len(recs) > 0 {
		t.Errorf("records left after uninstall: %v", recs)
	}
	if code, out := c.admin(ctx, "doctor"); code != 1 {
		t.Errorf("doctor exits %d after uninstall, want 1 (not installed):\n%s", code, out)
	}
	names = append(names, c.createPods(ctx, "after", 2)...)
	c.waitPodsStarted(ctx, names)
	if v, err := c.violations(ctx, "default"); err != nil || len(v) > 0 {
		t.Errorf("after uninstall: %v %v", v, err)
	}
	if f := c.sandboxFailures(ctx, "default"); len(f) > 0 {
		t.Errorf("pod starts refused: %v", f)
	}
	c.releaseAll(ctx)
}

// upgrade rolls safe-ipam's DaemonSet to the upgrade image tag.
func (c *cluster) upgrade(ctx context.Context) {
	c.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"initContainers":[{"name":"install","image":%q}],"containers":[{"name":"watch","image":%[1]q},{"name":"gc","image":%[1]q}]}}}}`, upgradeImage)
	if _, err := c.kube.AppsV1().DaemonSets("kube-system").Patch(ctx, "safe-ipam", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// createPods creates n pods named prefix-1... and returns their names.
func (c *cluster) createPods(ctx context.Context, prefix string, n int) []string {
	c.t.Helper()
	var names []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := c.kube.CoreV1().Pods("default").Create(ctx, pod(name, nil), metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// waitPodsStarted waits until every named pod runs with an address; a
// refused sandbox fails the test.
func (c *cluster) waitPodsStarted(ctx context.Context, names []string) {
	c.t.Helper()
	for _, name := range names {
		c.waitStarted(ctx, name, time.Minute)
	}
	if f := c.sandboxFailures(ctx, "default"); len(f) > 0 {
		c.t.Fatalf("pod starts refused: %v", f)
	}
}

// podIPs maps each running pod of the default namespace to its address.
func (c *cluster) podIPs(ctx context.Context) map[string]string {
	c.t.Helper()
	pods, err := c.runningPods(ctx, "default")
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods {
		out[p.Name] = p.Status.PodIP
	}
	return out
}

// requireHealthy fails the test on anything the watcher saw and on
// refused pod starts.
func (c *cluster) requireHealthy(ctx context.Context, w *watcher) {
	c.t.Helper()
	if seen := w.seen(); len(seen) > 0 {
		c.t.Errorf("while it ran: %v", seen)
	}
	if f := c.sandboxFailures(ctx, "default"); len(f) > 0 {
		c.t.Errorf("pod starts refused: %v", f)
	}
}

// holdsRecord says whether a safe-ipam record holds addr.
func (c *cluster) holdsRecord(ctx context.Context, addr netip.Addr) bool {
	c.t.Helper()
	for _, r := range c.readRecords(ctx) {
		for _, ip := range r.IPs {
			if got, ok := record.ParseAddr(ip); ok && got == addr {
				return true
			}
		}
	}
	return false
}

// waitProtected waits until the node runs safe-ipam again in the
// cluster's mode and returns how long after since that took. Takeover:
// calico-ipam is safe-ipam (the etcd build, since the node keeps its
// records in Calico's etcd). Own-conflist: safe-ipam's own config, the
// first the runtime reads, routes Calico's IPAM through safe-ipam, and
// <bin>/safe-ipam is the etcd build.
func (c *cluster) waitProtected(ctx context.Context, since time.Time) time.Duration {
	c.t.Helper()
	want := fileSum(c.t, filepath.Join(filepath.Dir(prepared.safeIPAM), builds.EtcdBinary))
	protected := func() bool {
		if c.mode == install.ModeTakeover {
			return fileSum(c.t, c.node.Path(filepath.Join(binDir, "calico-ipam"))) == want
		}
		confs, err := cninode.ReadConfs(c.node.Path(confDir))
		if err != nil || len(confs) == 0 || filepath.Base(confs[0].Path) != cninode.OwnConflist || confs[0].Err != nil {
			return false
		}
		routed := false
		for _, p := range confs[0].Plugins {
			routed = routed || p.RoutedThroughSafeIPAM()
		}
		return routed && fileSum(c.t, c.node.Path(filepath.Join(binDir, builds.CNIBinary))) == want
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if protected() {
			return time.Since(since).Round(time.Millisecond)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.t.Fatalf("the node did not run safe-ipam again (%s mode) in 30s", c.mode)
		}
	}
}

// cniFiles is every file of the first node's CNI bin and conf dirs with
// its SHA-256.
func (c *cluster) cniFiles() map[string]string { return c.cniFilesOn(c.node) }

// cniFilesOn is every file of n's CNI bin and conf dirs with its SHA-256.
func (c *cluster) cniFilesOn(n *kubenode.Node) map[string]string {
	out := map[string]string{}
	for _, dir := range []string{binDir, confDir} {
		entries, err := os.ReadDir(n.Path(dir))
		if err != nil {
			c.t.Fatal(err)
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			out[path] = fileSum(c.t, n.Path(path))
		}
	}
	return out
}

func fileSum(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// createDeployment creates a Deployment of n waiting pods labelled app=name.
func (c *cluster) createDeployment(ctx context.Context, name string, n int32) {
	c.t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec(false)}}}
	// Over every node, evenly (a no-op on one node).
	d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1,
		TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := c.kube.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	if err := c.node.WaitPodsReady(ctx, "default", "app="+name); err != nil {
		c.t.Fatal(err)
	}
}

// churn deletes the oldest running pod that selector matches every
// second until the returned func is called, which says how many it
// deleted.
func (c *cluster) churn(ctx context.Context, selector string) func() int {
	done := make(chan struct{})
	var wg sync.WaitGroup
	deleted := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			list, err := c.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				continue
			}
			running := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil || p.Status.PodIP == "" })
			if len(running) == 0 {
				continue
			}
			if c.kube.CoreV1().Pods("default").Delete(ctx, running[0].Name, metav1.DeleteOptions{}) == nil {
				deleted++
			}
		}
	}()
	return func() int {
		close(done)
		wg.Wait()
		return deleted
	}
}

// waitNoPods waits until no pod of namespace matches selector.
func (c *cluster) waitNoPods(ctx context.Context, namespace, selector string) {
	c.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
		list, err := c.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			c.t.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("pods %q in %s still there", selector, namespace)
		}
	}
}

// ctr runs containerd's own client against the first node's containerd,
// as ctrOn does.
func (c *cluster) ctr(ctx context.Context, args ...string) (string, error) {
	return c.ctrOn(ctx, c.node, args...)
}

// ctrOn runs containerd's own client against n's containerd, in the CRI
// plugin's namespace.
func (c *cluster) ctrOn(ctx context.Context, n *kubenode.Node, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.CRISocket(), "-n", "k8s.io"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// removeBehindCRI kills and removes the pod's containers and sandbox with
// ctr, so the CRI plugin never tears its network down: what a lost node
// state or a runtime wiped by hand leaves.
func (c *cluster) removeBehindCRI(ctx context.Context, podName string) {
	c.t.Helper()
	out, err := c.ctr(ctx, "containers", "ls", "-q", fmt.Sprintf(`labels."io.kubernetes.pod.name"==%s`, podName))
	if err != nil {
		c.t.Fatalf("ctr containers ls: %v: %s", err, out)
	}
	ids := strings.Fields(out)
	if len(ids) < 2 {
		c.t.Fatalf("containerd lists %v for %s; want its sandbox and container", ids, podName)
	}
	for _, id := range ids {
		_, _ = c.ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, err := c.ctr(ctx, "tasks", "rm", "-f", id); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if out, err := c.ctr(ctx, "containers", "rm", id); err != nil {
			c.t.Fatalf("ctr containers rm %s: %v: %s", id, err, out)
		}
	}
}

// stopContainer kills the safe-ipam pod's container named name; the
// kubelet starts it again.
func (c *cluster) stopContainer(ctx context.Context, name string) {
	c.t.Helper()
	out, err := c.ctr(ctx, "containers", "ls", "-q", fmt.Sprintf(`labels."io.kubernetes.container.name"==%s`, name))
	if err != nil || len(strings.Fields(out)) != 1 {
		c.t.Fatalf("ctr containers ls %s: %v: %q", name, err, out)
	}
	if out, err := c.ctr(ctx, "tasks", "kill", "-s", "SIGTERM", strings.TrimSpace(out)); err != nil {
		c.t.Fatalf("stopping %s: %v: %s", name, err, out)
	}
}
