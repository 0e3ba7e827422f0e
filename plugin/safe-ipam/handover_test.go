package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// safe-ipam links no etcd client: a call whose record store is etcd (here
// the default store, Calico's etcd) runs in safe-ipam-etcd beside it, with
// the same stdin, environment, result and exit code; a call over the file
// store runs without it. Without safe-ipam-etcd, the call over etcd fails
// with 50 naming it, and nothing is allocated or recorded.
func TestCNIBuildHandsCallsOverEtcdToSafeIPAMEtcd(t *testing.T) {
	server := etcdtest.Start(t)
	etcdConf := calicoTLSConf(t, server, "", "", "")
	fileConf := hostLocalConf(t, "1.1.0", "")
	alone := t.TempDir() // safe-ipam and host-local, without safe-ipam-etcd
	for _, name := range []string{"safe-ipam", "host-local"} {
		copyFile(t, filepath.Join(binDir, name), filepath.Join(alone, name))
	}
	call := func(dir, command, conf string) outcome {
		cmd := exec.Command(filepath.Join(dir, "safe-ipam"))
		cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=c1", "CNI_NETNS=/var/run/netns/x",
			"CNI_IFNAME=eth0", "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0", "CNI_PATH=" + dir}
		cmd.Stdin = strings.NewReader(conf)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		err := cmd.Run()
		return outcome{stdout: stdout.Bytes(), err: err}
	}

	code, msg := cniError(t, call(alone, "ADD", etcdConf))
	if code != 50 || !strings.Contains(msg, builds.EtcdBinary) {
		t.Errorf("ADD over etcd without %s: %d %q; want 50 naming it", builds.EtcdBinary, code, msg)
	}
	assertNothingAllocated(t, etcdConf)
	if n := records(t, server); n != 0 {
		t.Errorf("%d records in etcd after the refused ADD, want 0", n)
	}

	// Issue 41, item 2.10: a lean build under the etcd build's name, as a
	// copy or as the very file (a hard link), fails at once, naming it.
	for _, place := range []func(from, to string){func(from, to string) { copyFile(t, from, to) }, func(from, to string) {
		if err := os.Link(from, to); err != nil {
			t.Fatal(err)
		}
	}} {
		misplaced := t.TempDir()
		copyFile(t, filepath.Join(binDir, "safe-ipam"), filepath.Join(misplaced, "safe-ipam"))
		place(filepath.Join(misplaced, "safe-ipam"), filepath.Join(misplaced, builds.EtcdBinary))
		done := make(chan outcome, 1)
		go func() { done <- call(misplaced, "ADD", etcdConf) }()
		select {
		case out := <-done:
			if code, msg := cniError(t, out); code != 50 || !strings.Contains(msg, filepath.Join(misplaced, builds.EtcdBinary)) {
				t.Errorf("ADD over etcd with a lean build as %s: %d %q; want 50 naming the file", builds.EtcdBinary, code, msg)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("ADD over etcd with a lean build as %s still runs after 20s: it hands the call to itself", builds.EtcdBinary)
		}
	}
	assertNothingAllocated(t, etcdConf)

	if out := call(alone, "ADD", fileConf); out.err != nil {
		t.Errorf("ADD over the file store without %s: %v, %s", builds.EtcdBinary, out.err, out.stdout)
	} else if out := call(alone, "DEL", fileConf); out.err != nil {
		t.Errorf("DEL over the file store without %s: %v, %s", builds.EtcdBinary, out.err, out.stdout)
	}

	out := call(binDir, "ADD", etcdConf)
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if out.err != nil || json.Unmarshal(out.stdout, &res) != nil || len(res.IPs) != 1 {
		t.Fatalf("ADD over etcd, handed over: %v, %s; want one address", out.err, out.stdout)
	}
	if n := records(t, server); n != 1 {
		t.Errorf("%d records in etcd after ADD, want 1", n)
	}
	if out := call(binDir, "DEL", etcdConf); out.err != nil {
		t.Fatalf("DEL over etcd, handed over: %v, %s", out.err, out.stdout)
	}
	if n := records(t, server); n != 0 {
		t.Errorf("%d records in etcd after DEL, want 0", n)
	}
	assertNothingAllocated(t, etcdConf)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// Releases before safe-ipam-etcd existed tell safe-ipam's binaries by
// their main package or by builds.Mark; rolled back onto a node, they must
// still know the etcd build for safe-ipam's, or they keep it as Calico's
// original to restore.
func TestEtcdBuildCarriesTheMark(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(binDir, builds.EtcdBinary))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(builds.Mark)) {
		t.Errorf("%s does not carry builds.Mark", builds.EtcdBinary)
	}
}
