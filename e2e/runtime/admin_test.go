package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// The runtime as the liveness source of the admin commands (audit, repair,
// adopt, gc), against the real containerd: a sandbox whose DEL never reached safe-ipam (incident
// 001) is found by audit and collected by `safe-ipam gc --apply`; a
// running one never is; a runtime that is stopped or does not answer is
// exit 2 with nothing changed (incident 003), and so is one that lists
// nothing while the node has records.
func TestAdminWithRuntimeSource(t *testing.T) {
	ctx := testContext(t)
	n := newNode(t, nodeOptions{safe: true, gen: testbed.Modern, etcdStore: true})
	running := n.run(ctx, containerd.Pod{Namespace: "default", Name: "web-0", UID: podUID("web-0", 1)})
	runningAddr := n.ip(ctx, running)
	orphan := n.orphan(ctx, containerd.Pod{Namespace: "default", Name: "web-1", UID: podUID("web-1", 1)})
	before := n.state(ctx)
	if !slices.ContainsFunc(before, func(s string) bool { return strings.Contains(s, orphan) }) {
		t.Fatalf("the orphan %s left nothing to collect: %v", containerd.Short(orphan), before)
	}
	cri := "--cri-endpoint=" + n.cd.Endpoint()

	t.Run("gc dry run", func(t *testing.T) {
		out := n.admin(t, 1, "gc", "--conf", n.conflist(), "--cni-bin-dir", prepared.bin.Dir, cri)
		if !strings.Contains(out, "would release") || !containsLine(out, "would release", orphan) || containsLine(out, "would release", running) {
			t.Errorf("the dry run should release %s only:\n%s", containerd.Short(orphan), out)
		}
		n.assertUnchanged(before)
	})
	t.Run("adopt", func(t *testing.T) {
		// The running sandbox has its record: nothing to adopt.
		n.admin(t, 0, "adopt", "--conf", n.conflist(), cri)
		n.assertUnchanged(before)
	})
	t.Run("audit", func(t *testing.T) {
		out := n.admin(t, 1, "audit", "--conf", n.conflist(), "--min-age", "0s", cri)
		if !containsLine(out, "orphan-record", orphan) || containsLine(out, "orphan-record", running) {
			t.Errorf("audit should name %s, and only it, as an orphan record:\n%s", containerd.Short(orphan), out)
		}
	})
	for _, outage := range []struct {
		name      string
		stop, end func() error
	}{
		{"frozen runtime", n.cd.Freeze, n.cd.Thaw},
		{"stopped runtime", func() error { n.cd.Stop(); return nil }, func() error { return n.cd.Start(ctx) }},
	} {
		t.Run(outage.name, func(t *testing.T) {
			if err := outage.stop(); err != nil {
				t.Fatal(err)
			}
			// --timeout bounds the wait for a runtime that does not answer.
			for _, args := range [][]string{
				{"gc", "--conf", n.conflist(), "--cni-bin-dir", prepared.bin.Dir, "--apply", "--timeout", "3s", cri},
				{"audit", "--conf", n.conflist(), "--min-age", "0s", "--timeout", "3s", cri},
				{"repair", "--conf", n.conflist(), "--min-age", "0s", "--settle", "0s", "--apply", "--timeout", "3s", cri},
				{"adopt", "--conf", n.conflist(), "--apply", "--timeout", "3s", cri},
			} {
				out := n.admin(t, 2, args...)
				t.Logf("%s: %s", args[0], firstLine(out))
			}
			n.assertUnchanged(before)
			if err := outage.end(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("gc apply", func(t *testing.T) {
		n.admin(t, 0, "gc", "--conf", n.conflist(), "--cni-bin-dir", prepared.bin.Dir, "--apply", cri)
		after := n.state(ctx)
		for _, s := range after {
			if strings.Contains(s, orphan) {
				t.Errorf("still held after gc: %s", s)
			}
		}
		if kept := slices.DeleteFunc(slices.Clone(before), func(s string) bool { return strings.Contains(s, orphan) }); !slices.Equal(kept, after) {
			t.Errorf("gc changed more than the orphan:\nbefore %v\nafter  %v", before, after)
		}
		if addr := n.ip(ctx, running); addr != runningAddr {
			t.Errorf("the running sandbox reports %s, was %s", addr, runningAddr)
		}
	})
	t.Run("empty runtime while records exist", func(t *testing.T) {
		orphan2 := n.orphan(ctx, containerd.Pod{Namespace: "default", Name: "web-2", UID: podUID("web-2", 1)})
		n.remove(ctx, running)
		held := n.state(ctx)
		if len(held) == 0 {
			t.Fatalf("the orphan %s left nothing", containerd.Short(orphan2))
		}
		out := n.admin(t, 2, "gc", "--conf", n.conflist(), "--cni-bin-dir", prepared.bin.Dir, "--apply", cri)
		t.Logf("%s", firstLine(out))
		n.assertUnchanged(held)
	})
}

// orphan runs a sandbox for pod and removes it while containerd's CNI
// config routes DEL past safe-ipam, so the DEL never reaches it: its
// record and address stay, as after incident 001.
func (n *node) orphan(ctx context.Context, pod containerd.Pod) string {
	n.t.Helper()
	id := n.run(ctx, pod)
	mark := "orphan-" + pod.UID
	n.swapConflist(ctx, []any{map[string]any{"type": recorderPlugin, "record": n.callLog, "mark": mark}}, mark)
	n.remove(ctx, id)
	n.swapConflist(ctx, n.pluginChain(false, "restored-"+pod.UID), "restored-"+pod.UID)
	return id
}

// state is safe-ipam's records and Calico's allocations, one line each.
func (n *node) state(ctx context.Context) []string {
	n.t.Helper()
	recs, err := n.cluster.Records(ctx, networkName, n.net.Safe.Store)
	if err != nil {
		n.t.Fatal(err)
	}
	snap, err := n.cluster.Calico(ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("record %s %s %v", r.Attachment, r.State, r.IPs))
	}
	for _, a := range snap.Allocations() {
		out = append(out, fmt.Sprintf("calico %s %s", a.IP, a.Handle))
	}
	slices.Sort(out)
	return out
}

func (n *node) assertUnchanged(before []string) {
	n.t.Helper()
	if after := n.state(context.Background()); !slices.Equal(before, after) {
		n.t.Errorf("changed:\nbefore %v\nafter  %v", before, after)
	}
}

// admin runs a safe-ipam admin command on the host, as an operator or the
// DaemonSet would, and checks its exit code.
func (n *node) admin(t *testing.T, want int, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(testContext(t), prepared.bin.Path(testbed.SafeIPAM), args...)
	cmd.Env = append(containerd.ProcessEnv(), n.pluginEnv()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Errorf("safe-ipam %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, stdout.String(), stderr.String())
	}
	return stdout.String() + stderr.String()
}

// containsLine says whether one line of out has both words.
func containsLine(out, a, b string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, a) && strings.Contains(line, b) {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "safe-ipam ") {
			return line
		}
	}
	line, _, _ := strings.Cut(s, "\n")
	return line
}
