package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
)

// The file store syncs only the writes a power loss must not undo (see
// filestore's durabilityOf). These tests play a power loss at every crash
// point: the crash-test build undoes the file store's unsynced writes
// before it kills itself, the delegate's state (Calico's etcd, here
// host-local's files) survives, and the runtime then retries the ADD, DELs
// or GCs the attachment. Whatever survives must be settled by that call,
// and no committed record may ever claim an address the delegate does not
// hold for it: such a record is replayed by ADD while the address goes to
// another pod.

// crashBinDir builds safe-ipam with -tags crashpoints, once.
var crashBinDir = sync.OnceValues(func() (string, error) {
	dir := filepath.Join(binDir, "crashpoints")
	build := gobuild.Build{Out: filepath.Join(dir, "safe-ipam"), Pkgs: []string{"."}, Flags: []string{"-tags", "crashpoints"}}
	if err := build.Run(context.Background()); err != nil {
		return "", fmt.Errorf("building with crashpoints: %w", err)
	}
	return dir, nil
})

// node is one node's state: safe-ipam's records and host-local's leases.
type node struct {
	records, leases, cache string
}

const crashNet = "net1"

func newNode(t *testing.T) node {
	dir := t.TempDir()
	return node{records: filepath.Join(dir, "records"), leases: filepath.Join(dir, "host-local"), cache: filepath.Join(dir, "cache")}
}

// conf: GC collects pending records at once, as it does for the dead ones
// a power loss leaves once the grace period is over.
func (n node) conf(extra string) string {
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"ptp","ipam":{"type":"safe-ipam","delegate":{"type":"host-local"},
		"store":{"type":"file","dir":%q},"cacheDir":%q,"logFile":"","dataDir":%q,"ranges":[[{"subnet":"10.9.0.0/29"}]],
		"gcGracePeriod":"0s"}%s}`,
		crashNet, n.records, n.cache, n.leases, extra)
}

// call runs safe-ipam from dir; crashAt arms a power loss at that step.
func (n node) call(t *testing.T, dir, verb, cid string, crashAt guard.Step) error {
	t.Helper()
	conf := n.conf("")
	if verb == "GC" {
		conf = n.conf(`,"cni.dev/valid-attachments":[]`)
	}
	cmd := exec.Command(filepath.Join(dir, "safe-ipam"))
	cmd.Env = []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + cid, "CNI_NETNS=/var/run/netns/x", "CNI_IFNAME=eth0",
		"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0", "CNI_PATH=" + binDir}
	if crashAt != "" {
		cmd.Env = append(cmd.Env, "SAFE_IPAM_CRASH_AT="+string(crashAt), "SAFE_IPAM_CRASH_POWER_LOSS=1")
	}
	cmd.Stdin = strings.NewReader(conf)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w (%s)", verb, cid, err, stderr.String())
	}
	return nil
}

// killed says whether err is the crash point's SIGKILL.
func killed(err error) bool {
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return false
	}
	ws, ok := exitErr.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// leases maps each address host-local holds to its container ID.
func (n node) held(t *testing.T) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(n.leases, crashNet))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err != nil {
			continue // lock and last-reserved files
		}
		data, err := os.ReadFile(filepath.Join(n.leases, crashNet, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		cid, _, _ := strings.Cut(string(data), "\r\n")
		out[e.Name()] = cid
	}
	return out
}

// storedRecord is what the test reads of a record file; nil state means
// the file does not decode (an ownerless pending record).
type storedRecord struct {
	State string   `json:"state"`
	IPs   []string `json:"ips"`
}

// recordFiles maps container ID to record; index and temp files are skipped.
func (n node) recordFiles(t *testing.T) map[string]*storedRecord {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(n.records, crashNet))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*storedRecord{}
	for _, e := range entries {
		cid, ifName, ok := strings.Cut(e.Name(), ":")
		if !ok || ifName != "eth0" || !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(n.records, crashNet, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var rec storedRecord
		if json.Unmarshal(data, &rec) != nil {
			out[cid] = nil
			continue
		}
		out[cid] = &rec
	}
	return out
}

// checkClaims fails when a committed record claims an address that
// host-local does not hold for that record's container.
func (n node) checkClaims(t *testing.T, when string) {
	t.Helper()
	leases := n.held(t)
	for cid, rec := range n.recordFiles(t) {
		if rec == nil || rec.State != "committed" {
			continue
		}
		for _, ip := range rec.IPs {
			addr, _, _ := strings.Cut(ip, "/")
			if leases[addr] != cid {
				t.Errorf("%s: the committed record of %s claims %s, which the delegate holds for %q", when, cid, addr, leases[addr])
			}
		}
	}
}

// checkSettled fails when anything of cid is left after its DEL or GC.
func (n node) checkSettled(t *testing.T, cid, when string) {
	t.Helper()
	if rec, ok := n.recordFiles(t)[cid]; ok {
		t.Errorf("%s: a record of %s is left: %+v", when, cid, rec)
	}
	for addr, holder := range n.held(t) {
		if holder == cid {
			t.Errorf("%s: the delegate still holds %s for %s", when, addr, cid)
		}
	}
}

func TestPowerLossAtEveryCrashPoint(t *testing.T) {
	crashDir, err := crashBinDir()
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string][]guard.Step{
		"ADD": {guard.AddStart, guard.AddReserved, guard.AddDelegated, guard.AddCommitted},
		"DEL": {guard.DelStart, guard.DelMarked, guard.DelReleased, guard.DelForgotten},
		"GC":  {guard.GCReleased, guard.GCForgotten},
	}
	for _, verb := range []string{"ADD", "DEL", "GC"} {
		for _, step := range steps[verb] {
			for _, then := range []string{"ADD", "DEL", "GC"} {
				t.Run(fmt.Sprintf("%s/then-%s", step, then), func(t *testing.T) {
					powerLossThen(t, crashDir, verb, step, then)
				})
			}
		}
	}
}

// powerLossThen crashes verb at step with a power loss, lets the runtime
// react with then, and checks what is left.
func powerLossThen(t *testing.T, crashDir, verb string, step guard.Step, then string) {
	n := newNode(t)
	const cid = "c1"
	if verb != "ADD" {
		if err := n.call(t, binDir, "ADD", cid, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.call(t, crashDir, verb, cid, step); !killed(err) {
		t.Fatalf("%s with a power loss at %s: want the crash, got %v", verb, step, err)
	}
	n.checkClaims(t, "after the power loss")
	if err := n.call(t, binDir, then, cid, ""); err != nil {
		t.Fatalf("the runtime's %s after the power loss: %v", then, err)
	}
	n.checkClaims(t, "after the runtime's "+then)
	if then == "ADD" {
		if rec := n.recordFiles(t)[cid]; rec == nil || rec.State != "committed" {
			t.Fatalf("the retried ADD left %+v, want a committed record", rec)
		}
		if err := n.call(t, binDir, "DEL", cid, ""); err != nil {
			t.Fatal(err)
		}
	}
	n.checkSettled(t, cid, "after the runtime's "+then)
	// The address goes to the next pod, and no record claims it.
	if err := n.call(t, binDir, "ADD", "c2", ""); err != nil {
		t.Fatal(err)
	}
	n.checkClaims(t, "after the next pod's ADD")
}
