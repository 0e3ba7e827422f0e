package runtime

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// The DaemonSet's gc container, as deploy/safe-ipam.yaml writes it, on a
// real containerd (issue 19, item 5): containerd never sends CNI GC, so
// without it a sandbox whose DEL never came keeps its record and its
// address for ever. Its command runs here with only the node's paths
// (conf, bin dir, CRI socket), its period and its metrics port (a free
// loopback one) changed; on both stores, a
// later run collects such a sandbox, the running one keeps its address,
// and SIGTERM ends the loop with exit 0.
func TestDaemonSetGCLoop(t *testing.T) {
	for _, etcdStore := range []bool{false, true} {
		t.Run(map[bool]string{false: "file store", true: "etcd store"}[etcdStore], func(t *testing.T) {
			ctx := testContext(t)
			// containerd runs in a PID namespace of its own, as the
			// DaemonSet's gc container does relative to the runtime's
			// plugins: gc cannot see that an ADD's process runs, and only
			// gcGracePeriod keeps its pending record from a run that
			// lands in the middle of it (60s by default; 0s, as the other
			// tests use, made this test collect the orphan's own ADD).
			n := newNode(t, nodeOptions{safe: true, gen: testbed.Modern, etcdStore: etcdStore, gcGrace: "2s"})
			running := n.run(ctx, containerd.Pod{Namespace: "default", Name: "web-0", UID: podUID("web-0", 1)})
			addr := n.ip(ctx, running)

			var stdout, stderr bytes.Buffer
			cmd := exec.Command(prepared.bin.Path(testbed.SafeIPAM), n.daemonSetGC(t)[1:]...)
			cmd.Env = append(containerd.ProcessEnv(), n.pluginEnv()...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				if cmd.ProcessState == nil {
					cmd.Process.Kill()
					<-exited
				}
			}()

			orphan := n.orphan(ctx, containerd.Pod{Namespace: "default", Name: "web-1", UID: podUID("web-1", 1)})
			holds := func() bool {
				return slices.ContainsFunc(n.state(ctx), func(s string) bool { return strings.Contains(s, orphan) })
			}
			if !holds() {
				t.Fatalf("the orphan %s left nothing to collect", containerd.Short(orphan))
			}
			for deadline := time.Now().Add(time.Minute); holds(); time.Sleep(200 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the gc loop did not collect %s: %v", containerd.Short(orphan), n.state(ctx))
				}
			}
			if got := n.ip(ctx, running); got != addr {
				t.Errorf("the running sandbox reports %s, was %s", got, addr)
			}
			if !slices.ContainsFunc(n.state(ctx), func(s string) bool { return strings.Contains(s, running) }) {
				t.Errorf("the running sandbox lost its record or address: %v", n.state(ctx))
			}

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("gc loop ended with %v on SIGTERM; want exit 0\n%s", err, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("gc loop did not stop on SIGTERM")
			}
			t.Logf("gc loop output:\n%s%s", stdout.String(), stderr.String())
		})
	}
}

// daemonSetGC is the DaemonSet's gc command with this node's conflist,
// bin dir and CRI socket, and a period of a second.
func (n *node) daemonSetGC(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "safe-ipam.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatal(err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "gc" {
			continue
		}
		local := map[string]string{"--conf": n.conflist(), "--cni-bin-dir": prepared.bin.Dir, "--cri-endpoint": n.cd.Endpoint(), "--every": "1s",
			"--metrics-addr": "127.0.0.1:0", "--probe-socket": filepath.Join(shortDir(t), "gc.sock")}
		var out []string
		for _, arg := range c.Command {
			name, _, _ := strings.Cut(arg, "=")
			if v, ok := local[name]; ok {
				arg = name + "=" + v
				delete(local, name)
			}
			out = append(out, arg)
		}
		if len(local) > 0 {
			t.Fatalf("the DaemonSet's gc command %q does not pass %v", c.Command, local)
		}
		return out
	}
	t.Fatal("the DaemonSet has no gc container")
	return nil
}

// shortDir is a directory for a Unix socket, whose path must stay under
// 108 bytes: t.TempDir's carries the test's name.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
