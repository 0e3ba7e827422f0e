package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hangingDelegate writes a delegate that answers VERSION, then starts a
// child and hangs, writing both PIDs to dir.
func hangingDelegate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
if [ "$CNI_COMMAND" = VERSION ]; then
  echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}'
  exit 0
fi
sleep 300 &
echo $! > ` + dir + `/child.pid
echo $$ > ` + dir + `/delegate.pid
sleep 300
`
	if err := os.WriteFile(filepath.Join(dir, "hang"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// running says whether pid is a live process (a zombie is not).
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func pidIn(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		data, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && perr == nil {
			return pid
		}
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// waitGone fails unless every pid is gone within a few seconds.
func waitGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		alive := false
		for _, pid := range pids {
			if running(pid) {
				alive = true
			}
		}
		if !alive {
			return
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	t.Fatalf("%s: the delegate or its child outlived it", what)
}

// Issue 20, finding 2: a delegate that hangs is killed, with the children
// it started, when ipam.verbTimeout passes; the CNI error says so with
// code 11, and the record store is left as a crash leaves it.
func TestAHungDelegateIsKilledAtTheVerbDeadline(t *testing.T) {
	dir := hangingDelegate(t)
	conf := hostLocalConf(t, "1.0.0", fmt.Sprintf(`,"delegate":{"type":"hang","binDir":%q},"verbTimeout":"1s"`, dir))
	// The test's own limit, far above the verb's, so that a safe-ipam
	// without one fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "safe-ipam"))
	cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/var/run/netns/x", "CNI_IFNAME=eth0", "CNI_PATH=" + binDir + ":" + dir}
	cmd.Stdin = strings.NewReader(conf)
	stdout, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("ADD still ran after 30s with a 1s verbTimeout")
	}
	code, msg := cniError(t, outcome{stdout: stdout, err: err})
	if code != 11 || !strings.Contains(msg, "ipam.verbTimeout") {
		t.Errorf("ADD = %d %q; want 11 naming ipam.verbTimeout", code, msg)
	}
	waitGone(t, "the verb's deadline", pidIn(t, filepath.Join(dir, "delegate.pid")), pidIn(t, filepath.Join(dir, "child.pid")))
}

// Issue 20, finding 2: a runtime that gives up on safe-ipam kills only
// safe-ipam; its delegate dies with it rather than run on orphaned.
func TestTheDelegateDiesWithSafeIPAM(t *testing.T) {
	dir := hangingDelegate(t)
	conf := hostLocalConf(t, "1.0.0", fmt.Sprintf(`,"delegate":{"type":"hang","binDir":%q}`, dir))
	cmd := exec.Command(filepath.Join(binDir, "safe-ipam"))
	cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/var/run/netns/x", "CNI_IFNAME=eth0", "CNI_PATH=" + binDir + ":" + dir}
	cmd.Stdin = strings.NewReader(conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	delegate := pidIn(t, filepath.Join(dir, "delegate.pid"))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitGone(t, "safe-ipam's death", delegate)
	_ = syscall.Kill(pidIn(t, filepath.Join(dir, "child.pid")), syscall.SIGKILL) // a grandchild is the delegate's to reap
}

// Issue 22: the node settings beside the binary (as install writes them)
// reach the plugin: a takeover node can say delegateHandles "pod" where
// calico-node never rewrites it.
func TestNodeSettingsBesideTheBinary(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(binDir, "safe-ipam"))
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(dir, "safe-ipam")
	if err := os.WriteFile(self, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".safe-ipam.json"), []byte(`{"delegateHandles":"pod"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := hostLocalConf(t, "1.0.0", "")
	cmd := exec.Command(self)
	cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/var/run/netns/x", "CNI_IFNAME=eth0", "CNI_PATH=" + binDir,
		"CNI_ARGS=K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0"}
	cmd.Stdin = strings.NewReader(conf)
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("ADD: %v %s", err, out)
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(conf), &m)
	store := m["ipam"].(map[string]any)["store"].(map[string]any)["dir"].(string)
	rec, err := os.ReadFile(filepath.Join(store, "net1", "c1:eth0"))
	if err != nil || !strings.Contains(string(rec), `"handle":"c1"`) {
		t.Fatalf("record %s, %v; want the pod-mode handle c1 (the node settings' delegateHandles)", rec, err)
	}
}

// Issue 42, item 1: only the node lets the delegate live outside CNI_PATH
// (its settings beside the binary, which install writes); a network
// config that names a binDir outside it is refused with 7 otherwise.
func TestOnlyTheNodeLetsTheDelegateLiveOutsideCNIPath(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		dir, out := t.TempDir(), t.TempDir()
		for from, to := range map[string]string{filepath.Join(binDir, "safe-ipam"): filepath.Join(dir, "safe-ipam"), filepath.Join(binDir, "host-local"): filepath.Join(out, "host-local")} {
			data, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(to, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if allowed {
			if err := os.WriteFile(filepath.Join(dir, ".safe-ipam.json"), []byte(`{"delegateOutsideCNIPath":true}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(filepath.Join(dir, "safe-ipam"))
		cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/var/run/netns/x", "CNI_IFNAME=eth0", "CNI_PATH=" + binDir}
		cmd.Stdin = strings.NewReader(hostLocalConf(t, "1.0.0", fmt.Sprintf(`,"delegate":{"type":"host-local","binDir":%q}`, out)))
		stdout, err := cmd.Output()
		if allowed {
			if err != nil {
				t.Fatalf("ADD with the node's leave: %v %s", err, stdout)
			}
			continue
		}
		if code, msg := cniError(t, outcome{stdout: stdout, err: err}); code != 7 || !strings.Contains(msg, "--delegate-outside-cni-path") {
			t.Fatalf("ADD without the node's leave = %d %q; want 7 naming the node setting", code, msg)
		}
	}
}
