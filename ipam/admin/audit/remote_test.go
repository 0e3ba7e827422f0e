package audit_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// fencedWorld is node1 on Calico's Kubernetes datastore running c1, with
// Calico's allocation of x under the handle of "fenced", an ADD fenced on
// another node's claim whose sandbox is gone: mark writes the quarantine
// mark that keeps it.
func fencedWorld(t *testing.T, mark func(w *dsWorld, x string)) (w *dsWorld, x string) {
	const blk = "10.244.0.0/26"
	w = kubeWorld(t)
	ip := w.allocate(blk, "node1", dsNetwork+".c1", recent("db-0"))
	w.record("c1", ip, "db-0")
	x = w.allocate(blk, "node1", dsNetwork+".fenced", recent("web-1"))
	mark(w, x)
	return w, x
}

// auditAndRepair runs audit, then repair --apply, on w while c1 runs: each
// finds want with exit code, and repair acts on nothing; Calico still
// holds x under the fenced handle after.
func auditAndRepair(t *testing.T, w *dsWorld, x string, want map[audit.Kind]int, code int) []audit.Finding {
	t.Helper()
	args := []string{"--live", w.liveFile(liveness.Running{ContainerID: "c1", IfName: "eth0"}), "--min-age", "0s"}
	var findings []audit.Finding
	for _, fix := range []bool{false, true} {
		run := args
		if fix {
			run = append(run, "--apply")
		}
		got, rep, stderr := w.run(fix, run...)
		if !reflect.DeepEqual(kinds(rep.Findings), want) || got != code || len(rep.Actions) > 0 {
			t.Fatalf("fix %v: exit %d, findings %v, actions %+v; want %v, exit %d, no action; %s", fix, got, brief(rep.Findings), rep.Actions, want, code, stderr)
		}
		findings = rep.Findings
	}
	if state := w.state(); !slices.Contains(state, "address "+x+" "+dsNetwork+".fenced") {
		t.Errorf("after repair --apply, Calico no longer holds %s for the quarantine: %s", x, strings.Join(state, "\n"))
	}
	return findings
}

// Issue 45: an allocation the node keeps quarantined for another node's
// holder (a mark in its file store, for a claim of that node's) has no
// record here, and its own sandbox is gone: the audit reports the
// quarantine, never a leak, and repair --apply releases nothing. Taken
// for a leak, repair would free an address a running pod of the other
// node holds, and Calico would hand it out again.
func TestAnAllocationQuarantinedForAnotherNodeIsNoLeak(t *testing.T) {
	w, x := fencedWorld(t, func(w *dsWorld, x string) {
		fenced := record.Attachment{Network: dsNetwork, ContainerID: "fenced", IfName: "eth0"}
		now := time.Now().UTC()
		pending, err := w.records.Swap(w.ctx(), fenced, nil, &record.Record{Attachment: fenced, Node: "node1", Handle: dsNetwork + ".fenced",
			State: record.Pending, Created: now, Updated: now})
		if err != nil {
			t.Fatal(err)
		}
		holder := record.Peer{Attachment: record.Attachment{Network: dsNetwork, ContainerID: "theirs", IfName: "eth0"}, Node: "node2"}
		mark := record.RemoteQuarantine{Quarantine: record.Quarantine{Attachment: fenced, Node: "node1", IPs: []string{x + "/26"}},
			Claim: claims.Name(dsNetwork, netip.MustParseAddr(x)), Holder: holder, HolderHost: "them"}
		if err := w.records.(claims.Local).QuarantineFor(w.ctx(), pending, mark); err != nil {
			t.Fatal(err)
		}
	})
	findings := auditAndRepair(t, w, x, map[audit.Kind]int{audit.Quarantine: 1}, audit.ExitClean)
	if q := find(findings, audit.Quarantine); q.Address != x || q.Releasable {
		t.Errorf("the quarantine finding %+v", q)
	}
}

// A quarantine mark that does not decode fences all the same, and no gc
// will ever release its allocation: the audit names it inconsistent (not
// clean), and repair leaves it, and one whose handle holds nothing in
// Calico too (no handle count to fix).
func TestAQuarantineMarkThatDoesNotDecodeIsNotClean(t *testing.T) {
	w, x := fencedWorld(t, func(w *dsWorld, _ string) {
		dir := w.args[len(w.args)-1] // --store-dir
		for _, name := range []string{"q:fenced:eth0", "q:nothing:eth0"} {
			if err := os.WriteFile(filepath.Join(dir, dsNetwork, name), []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	})
	auditAndRepair(t, w, x, map[audit.Kind]int{audit.Inconsistent: 2}, audit.ExitFindings)
}
