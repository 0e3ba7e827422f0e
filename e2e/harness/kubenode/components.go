package kubenode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
)

// startControllerManager runs every controller, the node lifecycle
// controller among them: a Node silent for grace turns NotReady.
func (n *Node) startControllerManager(ctx context.Context, grace time.Duration) error {
	bin, err := kubetest.Command("kube-controller-manager")
	if err != nil {
		return err
	}
	kc := n.API.Kubeconfig
	return n.startProcess(ctx, "kube-controller-manager", bin,
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--controllers=*", "--leader-elect=false",
		"--node-monitor-grace-period="+grace.String(),
		"--flex-volume-plugin-dir=/var/lib/kubelet/volumeplugins",
		"--profiling=false")
}

func (n *Node) startScheduler(ctx context.Context) error {
	bin, err := kubetest.Command("kube-scheduler")
	if err != nil {
		return err
	}
	kc := n.API.Kubeconfig
	return n.startProcess(ctx, "kube-scheduler", bin,
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--leader-elect=false", "--profiling=false")
}

// kubeletConfig is the node's KubeletConfiguration. Nothing calls the
// kubelet's API, so it trusts nobody and allows all. Images are never
// collected and eviction is nearly off: imported images cannot be pulled
// again. The kernel defaults are checked, not written (see maskSysctls).
func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: %s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
readOnlyPort: 0
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1%%"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
failSwapOn: false
protectKernelDefaults: true
volumePluginDir: /var/lib/kubelet/volumeplugins
nodeStatusReportFrequency: 10s
`, n.cgroupRoot)
}

func (n *Node) startKubelet(ctx context.Context) error {
	bin, err := kubetest.Command("kubelet")
	if err != nil {
		return err
	}
	cfg := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(n.kubeletConfig()), 0o644); err != nil {
		return err
	}
	return n.startProcess(ctx, "kubelet", bin, "--config="+cfg, "--kubeconfig="+n.API.Kubeconfig,
		"--root-dir=/var/lib/kubelet", "--cert-dir=/var/lib/kubelet/pki",
		"--hostname-override="+n.Name, "--node-ip="+n.IP, "--v=2")
}

// cgroupHierarchies are the v1 hierarchies the kubelet wants the node's
// cgroup root in, and with all, the hybrid layout's cgroup v2 one too,
// where runc also makes the containers' cgroups.
func cgroupHierarchies(all bool) ([]string, error) {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && (all || e.Name() != "unified") {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return dirs, nil
}

// makeCgroups creates the node's cgroup root in every hierarchy:
// cgroups are not namespaced, so each node gets its own subtree.
func (n *Node) makeCgroups(context.Context) error {
	dirs, err := cgroupHierarchies(false)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(d, n.cgroupRoot), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// removeCgroups removes the node's cgroups, deepest first, once their
// processes are gone (they die with the namespace's PID 1).
func removeCgroups(root string) error {
	dirs, err := cgroupHierarchies(true)
	if err != nil {
		return err
	}
	var left []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left = left[:0]
		for _, d := range dirs {
			left = append(left, removeTree(filepath.Join(d, root))...)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("cgroups left behind: %v", left)
	}
	return nil
}

// removeTree rmdirs top and its descendants, deepest first, and returns
// what is still there.
func removeTree(top string) []string {
	var dirs []string
	_ = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	slices.Reverse(dirs)
	var left []string
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			left = append(left, d)
		}
	}
	return left
}

// keepLogs copies every component's log out of the node's dir, which is
// removed, and prints their tails.
func (n *Node) keepLogs(t testing.TB) {
	keep, err := os.MkdirTemp("", "kubenode-logs-")
	if err != nil {
		t.Logf("kubenode %s: keeping logs: %v", n.Name, err)
		return
	}
	logs := map[string]string{
		"kube-apiserver.log": filepath.Join(n.Dir, "api", "kube-apiserver.log"),
		"containerd.log":     filepath.Join(n.Dir, "containerd", "containerd.log"),
	}
	if entries, err := os.ReadDir(filepath.Join(n.Dir, "logs")); err == nil {
		for _, e := range entries {
			logs[e.Name()] = filepath.Join(n.Dir, "logs", e.Name())
		}
	}
	// Calico's and safe-ipam's logs on the node, and the pods' logs.
	_ = filepath.WalkDir(filepath.Join(n.Dir, "var-log"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".log") {
			rel, _ := filepath.Rel(filepath.Join(n.Dir, "var-log"), path)
			logs["var-log."+strings.ReplaceAll(rel, "/", ".")] = path
		}
		return nil
	})
	for name, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			continue
		}
		_ = os.WriteFile(filepath.Join(keep, name), b, 0o644)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		t.Logf("kubenode %s: %s (tail):\n%s", n.Name, name, b)
	}
	t.Logf("kubenode %s: every component's log is kept in %s", n.Name, keep)
}

// dirPrefix names a node's scratch dir in the temp dir, and its cgroup
// root; holderFile, in the scratch dir, holds its PID 1's host PID.
const (
	dirPrefix  = "sipk-"
	holderFile = "holder.pid"
)

// sweep removes what nodes of killed test runs left: a test binary killed
// on a timeout takes the node's processes with it (PID 1 dies with it) but
// runs no cleanup, so its cgroups and scratch dir stay. A node counts as
// left when its PID 1 is gone; one still starting (no PID file yet), or
// running in another test binary, is never touched.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		pid, err := os.ReadFile(filepath.Join(dir, holderFile))
		if err != nil || processAlive(strings.TrimSpace(string(pid))) {
			continue
		}
		if removeCgroups("/"+filepath.Base(dir)) == nil {
			_ = os.RemoveAll(dir)
		}
	}
}

// processAlive says whether /proc has the PID: a dead holder's PID is
// gone, or (rarely) reused, which only delays the sweep.
func processAlive(pid string) bool {
	_, err := os.Stat(filepath.Join("/proc", pid))
	return err == nil
}
