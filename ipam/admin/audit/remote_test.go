package audit_test

import (
	"net/netip"
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

// Issue 45: an allocation the node keeps quarantined for another node's
// holder (a mark in its file store, for a claim of that node's) has no
// record here, and its own sandbox is gone: the audit reports the
// quarantine, never a leak, and repair --apply releases nothing. Taken
// for a leak, repair would free an address a running pod of the other
// node holds, and Calico would hand it out again.
func TestAnAllocationQuarantinedForAnotherNodeIsNoLeak(t *testing.T) {
	const blk = "10.244.0.0/26"
	w := kubeWorld(t)
	ip := w.allocate(blk, "node1", dsNetwork+".c1", recent("db-0"))
	w.record("c1", ip, "db-0")
	x := w.allocate(blk, "node1", dsNetwork+".fenced", recent("web-1"))
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
	args := []string{"--live", w.liveFile(liveness.Running{ContainerID: "c1", IfName: "eth0"}), "--min-age", "0s"}
	for _, fix := range []bool{false, true} {
		run := args
		if fix {
			run = append(run, "--apply")
		}
		code, rep, stderr := w.run(fix, run...)
		if want := map[audit.Kind]int{audit.Quarantine: 1}; !reflect.DeepEqual(kinds(rep.Findings), want) || code != audit.ExitClean {
			t.Fatalf("fix %v: exit %d, findings %v, want %v; %s", fix, code, brief(rep.Findings), want, stderr)
		}
		if q := find(rep.Findings, audit.Quarantine); q.Address != x || q.Releasable {
			t.Errorf("fix %v: the quarantine finding %+v", fix, q)
		}
		if len(rep.Actions) > 0 {
			t.Errorf("fix %v: repair acts on an allocation quarantined for another node's holder: %+v", fix, rep.Actions)
		}
	}
	if state := w.state(); !slices.Contains(state, "address "+x+" "+dsNetwork+".fenced") {
		t.Errorf("after repair --apply, Calico no longer holds %s for the quarantine: %s", x, strings.Join(state, "\n"))
	}
}
