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
	dir := t.TempDir()
	pause := filepath.Join(dir, "pause")
	build := gobuild.Build{Out: pause, Pkgs: []string{"../containerd/cmd/pause"}, Env: []string{"CGO_ENABLED=0"}}
	if err := build.Run(ctx); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "pause.tar")
	if err := containerd.BuildPauseImage(pause, img, PauseImage); err != nil {
		t.Fatal(err)
	}
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

// runAPod starts a node, runs a host-network pod on it, and returns the
// node's cgroup root; the node is torn down when t ends.
func runAPod(ctx context.Context, t *testing.T, pause, img, name string) string {
	n := Start(t, Options{Name: name, Pause: pause, SandboxImage: PauseImage, Images: []string{img}})
	if err := os.WriteFile(n.Path("/etc/cni/net.d/10-test.conflist"),
		[]byte(`{"cniVersion":"1.0.0","name":"test","plugins":[{"type":"loopback"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "host", Namespace: "default"},
		Spec: corev1.PodSpec{HostNetwork: true, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: PauseImage, ImagePullPolicy: corev1.PullNever}}}}
	if _, err := n.API.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
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
