package cluster

import (
	"context"
	"fmt"
	"os"
	"regexp"
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
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// roundPeriod spaces the force deletes: with filler pods started in
// between, several rounds span the kubelet's once-a-minute garbage
// collection, whose StopPodSandbox and RemovePodSandbox DEL every dead
// sandbox again.
const roundPeriod = 12 * time.Second

// Scenario 1 of issue 23, the incident under a real kubelet: web-0 of a
// StatefulSet is force-deleted again and again while other pods start on
// the node, with Calico 2.x pod-name handles. Its container ignores
// SIGTERM, so the new web-0's ADD comes before the old sandbox's DEL, and
// every old sandbox is DELeted twice more at the kubelet's garbage
// collection.
//
// Control (Calico alone): the running web-0's address becomes free in
// Calico's data and is handed to another pod, which the node then refuses
// (the /32 route is web-0's). With safe-ipam: never, across at least one
// garbage collection's late DELs, and every address is released once the
// StatefulSet and the pods are deleted.
func TestStatefulSetForceDelete(t *testing.T) {
	for _, safe := range []bool{false, true} {
		name := map[bool]string{false: "calico alone", true: "safe-ipam"}[safe]
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t, 6*time.Minute)
			c := newCluster(t, true)
			c.legacyWeb0(ctx, safe)
			c.createWeb(ctx)
			w := c.watch(ctx, "default")
			lateDELs := false
			for round := 1; ; round++ {
				start := time.Now()
				c.forceDeleteWeb0(ctx)
				// The old sandbox's DEL comes once its container is
				// killed, at the end of its 2 s grace period; a pod that
				// starts after it gets what it freed.
				time.Sleep(3 * time.Second)
				filler := fmt.Sprintf("filler-%d", round)
				if _, err := c.kube.CoreV1().Pods("default").Create(ctx, pod(filler, map[string]string{"app": "filler"}), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				c.waitStarted(ctx, filler, 20*time.Second)
				lateDELs = lateDELs || c.lateTeardowns() > 0
				seen := w.seen()
				if refused := c.refused(ctx); !safe && refused != "" {
					// The refused address is one a running web-0 had while
					// Calico's data called it free.
					dst := refusedDst.FindStringSubmatch(refused)
					if dst == nil || !slices.ContainsFunc(seen, func(s string) bool {
						return strings.Contains(s, "web-0") && strings.Contains(s, " runs with "+dst[1]+",")
					}) {
						t.Fatalf("a pod start was refused, but not for a web-0 address Calico had freed: %s; seen: %v", refused, seen)
					}
					t.Logf("round %d: %s; %s", round, seen[0], refused)
					break
				}
				if safe && lateDELs && round >= 4 {
					break
				}
				if time.Since(w.started) > 3*time.Minute {
					if safe {
						t.Fatalf("no old web-0 sandbox was torn down again at the kubelet's garbage collection in %d rounds", round)
					}
					t.Fatalf("the control did not show the incident in %d rounds: %v; refused: %q", round, seen, c.refused(ctx))
				}
				time.Sleep(time.Until(start.Add(roundPeriod)))
			}
			w.stop()
			if !safe {
				return
			}
			if seen := w.seen(); len(seen) > 0 {
				t.Errorf("with safe-ipam: %v", seen)
			}
			if refused := c.sandboxFailures(ctx, "default"); len(refused) > 0 {
				t.Errorf("with safe-ipam, pod starts were refused: %v", refused)
			}
			t.Logf("old web-0 sandboxes torn down again at the kubelet's garbage collection, while a newer web-0 ran: %d", c.lateTeardowns())
			if err := c.kube.AppsV1().StatefulSets("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			c.releaseAll(ctx)
		})
	}
}

// legacyWeb0 sets the cluster up for web-0's Calico 2.x pod-name handle:
// with safe-ipam installed (safe), or Calico alone (the control).
func (c *cluster) legacyWeb0(ctx context.Context, safe bool) {
	c.t.Helper()
	switch {
	case safe && prepared.realCalico:
		// Calico 3.x keys by container: the manifest as written.
		c.installSafeIPAM(ctx)
	case safe:
		c.installSafeIPAM(ctx, "--delegate-handles=pod")
	case prepared.realCalico:
		// Calico 3.x keys ADD by container but still releases the
		// pod-name handle on DEL: web-0 carries one, as the pods
		// of a cluster upgraded from Calico 2.x do.
		c.rekeyWeb0 = true
	}
}

// createWeb creates the StatefulSet web (one replica) and waits for web-0.
func (c *cluster) createWeb(ctx context.Context) {
	c.t.Helper()
	c.createWebOn(ctx, podSpec(true))
}

// createWebOn creates the StatefulSet web (one replica) of pods with spec
// and waits for web-0.
func (c *cluster) createWebOn(ctx context.Context, spec corev1.PodSpec) {
	c.t.Helper()
	one := int32(1)
	labels := map[string]string{"app": "web"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{Replicas: &one, ServiceName: "web",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}}}
	if _, err := c.kube.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitStarted(ctx, "web-0", time.Minute)
	c.rekey(ctx, "web-0")
}

// forceDeleteWeb0 deletes web-0 with grace period 0, as `kubectl delete
// pod --force --grace-period=0` does, and waits for the StatefulSet's new
// web-0 to run.
func (c *cluster) forceDeleteWeb0(ctx context.Context) {
	c.t.Helper()
	old, err := c.kube.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	zero := int64(0)
	if err := c.kube.CoreV1().Pods("default").Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		c.t.Fatal(err)
	}
	c.waitStartedNot(ctx, "web-0", old.UID, time.Minute)
	c.rekey(ctx, "web-0")
}

// rekey moves the running pod's allocation to its pod-name handle when
// rekeyWeb0 says so.
func (c *cluster) rekey(ctx context.Context, name string) {
	c.t.Helper()
	if !c.rekeyWeb0 {
		return
	}
	p, err := c.kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	out, err := c.ctrOn(ctx, c.nodeOf(p), "containers", "ls", "-q", fmt.Sprintf(`labels."io.kubernetes.pod.uid"==%s,labels."io.cri-containerd.kind"==sandbox`, p.UID))
	if err != nil || len(strings.Fields(out)) != 1 {
		c.t.Fatalf("the sandbox of %s (uid %s): %v: %q", name, p.UID, err, out)
	}
	ds := testbed.EtcdDatastore{Client: c.node.API.Etcd().Client(), Endpoint: c.node.EtcdEndpoint()}
	if err := ds.Rekey(ctx, network, strings.TrimSpace(out), testbed.Pod{Namespace: "default", Name: name}); err != nil {
		c.t.Fatal(err)
	}
}

// waitStarted waits until the pod runs with an address, or the node
// refused its sandbox (which the caller judges), or d passes.
func (c *cluster) waitStarted(ctx context.Context, name string, d time.Duration) {
	c.waitStartedNot(ctx, name, "", d)
}

func (c *cluster) waitStartedNot(ctx context.Context, name string, oldUID types.UID, d time.Duration) {
	c.t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		p, err := c.kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.UID != oldUID && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return
		}
		if strings.Contains(strings.Join(c.sandboxFailures(ctx, "default"), "\n"), name+":") {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s (not uid %q) did not start in %s", name, oldUID, d)
		}
	}
}

// refused is the first sandbox failure that says an address already
// routes to another pod: the node refusing a duplicate.
func (c *cluster) refused(ctx context.Context) string {
	for _, f := range c.sandboxFailures(ctx, "default") {
		if strings.Contains(f, "already exists for an interface other than") {
			return f
		}
	}
	return ""
}

var (
	refusedDst = regexp.MustCompile(`Dst: ([0-9.]+)/32`)
	sandboxID  = regexp.MustCompile(`RunPodSandbox for &PodSandboxMetadata\{Name:web-0,Uid:([^,]+),.*returns sandbox id \\?"([0-9a-f]+)`)
	teardown   = regexp.MustCompile(`TearDown network for sandbox \\?"([0-9a-f]+)\\?" successfully`)
)

// lateTeardowns counts the CNI DELs containerd ran for a web-0 sandbox
// after its first (the kill): the kubelet's garbage collection's, which
// come while a newer web-0 runs.
func (c *cluster) lateTeardowns() int { return c.teardowns(c.node, "")[1] }

// teardowns counts the CNI DELs n's containerd ran for the web-0 sandboxes
// (of the pod uid alone, unless ""): the first ones, and those after the
// first.
func (c *cluster) teardowns(n *kubenode.Node, uid types.UID) [2]int {
	log, err := os.ReadFile(n.Containerd.LogPath())
	if err != nil {
		c.t.Fatal(err)
	}
	web := map[string]bool{}
	for _, m := range sandboxID.FindAllStringSubmatch(string(log), -1) {
		web[m[2]] = uid == "" || m[1] == string(uid)
	}
	count := map[string]int{}
	var out [2]int
	for _, m := range teardown.FindAllStringSubmatch(string(log), -1) {
		if web[m[1]] {
			count[m[1]]++
			out[min(count[m[1]]-1, 1)]++
		}
	}
	return out
}

// watcher checks the running pods against Calico's data every 200 ms
// and keeps what it saw wrong, each thing once, when it was first seen.
type watcher struct {
	c       *cluster
	started time.Time
	mu      sync.Mutex
	found   []string
	known   map[string]bool
	done    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

func (c *cluster) watch(ctx context.Context, namespace string) *watcher {
	w := &watcher{c: c, started: time.Now(), done: make(chan struct{}), known: map[string]bool{}}
	c.t.Cleanup(w.stop)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.done:
				return
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			v, err := c.violations(ctx, namespace)
			if err != nil {
				if ctx.Err() == nil {
					c.t.Logf("watch: %v", err)
				}
				continue
			}
			w.mu.Lock()
			for _, s := range v {
				if len(w.found) < 20 && !w.known[s] {
					w.known[s] = true
					w.found = append(w.found, fmt.Sprintf("%s: %s", time.Since(w.started).Round(time.Second), s))
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watcher) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.found...)
}

func (w *watcher) stop() {
	w.stopped.Do(func() { close(w.done) })
	w.wg.Wait()
}
