package kubenode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"
	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// A node comes up, becomes Ready once a CNI config is there, runs a pod
// on its host network, and leaves no cgroup, mount or process behind; two
// do so side by side.
func TestNodeRunsAPodAndLeavesNothing(t *testing.T) {
	testbed.RequireHost(t, containerd.CheckHost("kubenode", "mount"))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pause, img := pauseImage(ctx, t)
	// Two nodes side by side: each has its own namespaces, ports and
	// cgroup root.
	roots := make([]string, 2)
	t.Run("side by side", func(t *testing.T) {
		for i := range roots {
			t.Run(fmt.Sprintf("node%d", i), func(t *testing.T) {
				t.Parallel()
				roots[i] = runAPod(ctx, t, pause, img, fmt.Sprintf("kubenode-test-%d", i))
			})
		}
	})
	requireNoCgroups(t, roots)
}

// Three nodes make one cluster: pods spread over them; a node whose
// kubelet stops turns NotReady and Ready again when it returns; a killed
// node's Node can be deleted; nothing is left afterwards.
func TestClusterOfThree(t *testing.T) {
	testbed.RequireHost(t, containerd.CheckHost("kubenode", "mount"))
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	pause, img := pauseImage(ctx, t)
	var roots []string
	t.Run("cluster", func(t *testing.T) {
		c := StartCluster(t, ClusterOptions{Names: []string{"a", "b", "c"}, NodeMonitorGracePeriod: 20 * time.Second,
			Node: Options{Pause: pause, SandboxImage: PauseImage, Images: []string{img}}})
		for _, n := range c.Nodes {
			roots = append(roots, n.cgroupRoot)
			writeLoopbackConf(t, n)
		}
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		spread := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		for i := range c.Nodes {
			p := hostPod(fmt.Sprintf("spread-%d", i))
			p.Labels = map[string]string{"app": "spread"}
			p.Spec.TopologySpreadConstraints = spread
			if _, err := c.API.Client().CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Nodes[0].WaitPodsReady(ctx, "default", "app=spread"); err != nil {
			t.Fatal(err)
		}
		pods, err := c.API.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		on := map[string]bool{}
		for _, p := range pods.Items {
			on[p.Spec.NodeName] = true
		}
		if len(on) != len(c.Nodes) {
			t.Errorf("pods ran on %v, want every node", on)
		}
		a := c.Nodes[0]
		a.StopKubelet()
		start := time.Now()
		if err := a.WaitUnreachable(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("node a NotReady %s after its kubelet stopped", time.Since(start).Round(100*time.Millisecond))
		if err := a.StartKubelet(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		dead := c.Nodes[2]
		dead.Kill()
		if err := dead.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		if c.Node("c") != dead || c.Node("d") != nil {
			t.Error("Node looks nodes up wrong")
		}
	})
	requireNoCgroups(t, roots)
}

// pauseImage builds the pause program and its image.
func pauseImage(ctx context.Context, t *testing.T) (pause, img string) {
	dir := t.TempDir()
	pause = filepath.Join(dir, "pause")
	build := gobuild.Build{Out: pause, Pkgs: []string{"../containerd/cmd/pause"}, Env: []string{"CGO_ENABLED=0"}}
	if err := build.Run(ctx); err != nil {
		t.Fatal(err)
	}
	img = filepath.Join(dir, "pause.tar")
	if err := containerd.BuildPauseImage(pause, img, PauseImage); err != nil {
		t.Fatal(err)
	}
	return pause, img
}

// requireNoCgroups fails t if any of the cgroup roots is left.
func requireNoCgroups(t *testing.T, roots []string) {
	hier, err := cgroupHierarchies(true)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hier {
		for _, root := range roots {
			if _, err := os.Stat(filepath.Join(h, root)); root != "" && err == nil {
				t.Errorf("cgroup %s left behind", filepath.Join(h, root))
			}
		}
	}
}

// writeLoopbackConf gives the node a CNI config, which makes it Ready.
func writeLoopbackConf(t *testing.T, n *Node) {
	if err := os.WriteFile(n.Path("/etc/cni/net.d/10-test.conflist"),
		[]byte(`{"cniVersion":"1.0.0","name":"test","plugins":[{"type":"loopback"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostPod is a pod on its node's host network.
func hostPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{HostNetwork: true, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: PauseImage, ImagePullPolicy: corev1.PullNever}}}}
}

// runAPod starts a node, runs a host-network pod on it, and returns the
// node's cgroup root; the node is torn down when t ends.
func runAPod(ctx context.Context, t *testing.T, pause, img, name string) string {
	n := Start(t, Options{Name: name, Pause: pause, SandboxImage: PauseImage, Images: []string{img}})
	writeLoopbackConf(t, n)
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := n.API.Client().CoreV1().Pods("default").Create(ctx, hostPod("host"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitPodsReady(ctx, "default", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/etc/cni/net.d/10-test.conflist"); err == nil {
		t.Error("the node's CNI config is on the host")
	}
	return n.cgroupRoot
}

// A node whose test binary was killed leaves its scratch dir and cgroups;
// the next start sweeps them, and never a node whose PID 1 still runs.
func TestSweepRemovesKilledNodes(t *testing.T) {
	testbed.RequireHost(t, containerd.CheckHost("kubenode", "mount"))
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{"killed": dead.Process.Pid, "running": os.Getpid()}
	dirs := map[string]string{}
	hier, err := cgroupHierarchies(false)
	if err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		dir, err := os.MkdirTemp(os.TempDir(), dirPrefix)
		if err != nil {
			t.Fatal(err)
		}
		dirs[name] = dir
		t.Cleanup(func() {
			_ = removeCgroups("/" + filepath.Base(dir))
			_ = os.RemoveAll(dir)
		})
		if err := os.WriteFile(filepath.Join(dir, holderFile), []byte(fmt.Sprint(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, h := range hier {
			if err := os.MkdirAll(filepath.Join(h, filepath.Base(dir), "kubepods"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	sweep()
	for name, dir := range dirs {
		_, statErr := os.Stat(dir)
		_, cgErr := os.Stat(filepath.Join(hier[0], filepath.Base(dir)))
		if kept := statErr == nil && cgErr == nil; kept != (name == "running") {
			t.Errorf("%s node: dir kept %v (%v), cgroup kept %v (%v)", name, statErr == nil, statErr, cgErr == nil, cgErr)
		}
	}
}
