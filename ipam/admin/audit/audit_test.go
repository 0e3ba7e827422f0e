package audit_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/repair"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

const blk = "10.244.0.0/26"

func podAttrs(pod string) map[string]string {
	return map[string]string{"namespace": "default", "pod": pod, "node": "node1", "timestamp": "2026-11-21 18:29:54 +0000 UTC"}
}

func TestCleanStoreExitsZero(t *testing.T) {
	w := newWorld(t)
	ip := w.allocate(blk, "node1", "net1.c1", podAttrs("web-0"))
	w.record("net1", "c1", "node1", ip, "web-0")
	live := w.liveFile(liveness.Running{ContainerID: "c1", IfName: "eth0"})
	code, rep, stderr := w.run(false, "--live", live)
	if code != audit.ExitClean || len(rep.Findings) != 0 {
		t.Fatalf("exit %d, findings %+v, stderr %s", code, rep.Findings, stderr)
	}
	if rep.Summary.Allocations != 1 || rep.Summary.Records != 1 || rep.Summary.Blocks != 1 {
		t.Errorf("summary %+v", rep.Summary)
	}
}

func TestEveryFindingKind(t *testing.T) {
	w := newWorld(t)
	// pod-name handles: Calico 3.x attributes, and Calico 2.x with none.
	w.allocate(blk, "node1", "default.web-0", podAttrs("web-0"))
	w.allocate(blk, "node1", "kube-system.prometheus-0", nil)
	// early-release: the record holds an address Calico has freed.
	early := w.allocate(blk, "node1", "net1.c2", podAttrs("web-2"))
	w.record("net1", "c2", "node1", early, "web-2")
	w.release(blk, "net1.c2")
	// duplicate: c3's address went to c4, and both are recorded.
	dup := w.allocate(blk, "node1", "net1.c4", podAttrs("web-4"))
	w.record("net1", "c3", "node1", dup, "web-3")
	w.record("net1", "c4", "node1", dup, "web-4")
	// leak: no record, not live. A live one with no record is fine.
	w.allocate(blk, "node1", "net1.gone", podAttrs("old"))
	w.allocate(blk, "node1", "net1.running", podAttrs("other"))
	// orphan: a record whose attachment is not running.
	orphan := w.allocate(blk, "node1", "net1.c5", podAttrs("web-5"))
	w.record("net1", "c5", "node1", orphan, "web-5")
	// inconsistent: a handle document that miscounts, an affinity alone.
	h := w.handle("net1.running")
	h.Block[blk] = 3
	w.put(calico.HandleKey("net1.running"), h)
	w.put(calico.AffinityKey("node1", mustPrefix("10.244.9.0/26")), calico.ConfirmedAffinity())
	// A document that does not decode is reported, not fatal.
	if _, err := w.cli().Put(context.Background(), calico.HandleKey("net1.garbled"), "{"); err != nil {
		t.Fatal(err)
	}
	// Calico's own tunnel address is never judged.
	w.allocate(blk, "node1", "ipip-tunnel-addr-node1", map[string]string{"node": "node1", "type": "ipipTunnelAddress"})

	live := w.liveFile(
		liveness.Running{ContainerID: "c2", IfName: "eth0"}, liveness.Running{ContainerID: "c3", IfName: "eth0"},
		liveness.Running{ContainerID: "c4", IfName: "eth0"}, liveness.Running{ContainerID: "running", IfName: "eth0"},
	)
	code, rep, _ := w.run(false, "--live", live)
	want := map[audit.Kind]int{audit.PodNameHandle: 2, audit.EarlyRelease: 1, audit.Duplicate: 1, audit.Leak: 1, audit.OrphanRecord: 1, audit.Inconsistent: 3}
	if code != audit.ExitFindings || !reflect.DeepEqual(kinds(rep.Findings), want) {
		t.Fatalf("exit %d, kinds %v; want %v\n%+v", code, kinds(rep.Findings), want, rep.Findings)
	}
	if f := find(rep.Findings, audit.EarlyRelease); f.Address != early {
		t.Errorf("early-release at %s, want %s", f.Address, early)
	}
	if f := find(rep.Findings, audit.Duplicate); f.Address != dup || len(f.Records) != 2 {
		t.Errorf("duplicate %+v", f)
	}
	if f := find(rep.Findings, audit.Leak); f.Handle != "net1.gone" || !f.Releasable {
		t.Errorf("leak %+v", f)
	}

	// Without a liveness source nothing is judged dead.
	code, rep, _ = w.run(false)
	got := kinds(rep.Findings)
	if code != audit.ExitFindings || got[audit.Leak] != 0 || got[audit.OrphanRecord] != 0 || got[audit.Unverified] != 2 {
		t.Errorf("without liveness: %v", got)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestRepairDryRunChangesNothingAndApplyAuditsClean(t *testing.T) {
	w := newWorld(t)
	w.allocate(blk, "node1", "default.web-0", podAttrs("web-0")) // owner gone
	early := w.allocate(blk, "node1", "net1.c2", podAttrs("web-2"))
	w.record("net1", "c2", "node1", early, "web-2")
	w.release(blk, "net1.c2")
	w.allocate(blk, "node1", "net1.gone", podAttrs("old"))
	h := w.handle("net1.c9")
	w.allocate(blk, "node1", "net1.c9", podAttrs("web-9"))
	w.record("net1", "c9", "node1", "10.244.0.3", "web-9") // its own address
	h = w.handle("net1.c9")
	h.Block[blk] = 5
	w.put(calico.HandleKey("net1.c9"), h)
	// Entries name their pods, as the CNI cache does, so the source can
	// speak for the pod-name handle.
	live := w.liveFile(liveness.Running{ContainerID: "c2", IfName: "eth0", PodNamespace: "default", PodName: "web-2"},
		liveness.Running{ContainerID: "c9", IfName: "eth0", PodNamespace: "default", PodName: "web-9"})

	before := w.dump()
	code, rep, _ := w.run(true, "--live", live)
	if code != audit.ExitFindings || len(rep.Actions) != 4 {
		t.Fatalf("dry run: exit %d, actions %+v, refused %+v", code, rep.Actions, rep.Refused)
	}
	if after := w.dump(); !reflect.DeepEqual(before, after) {
		t.Fatal("dry run changed etcd")
	}
	code, rep, _ = w.run(true, "--live", live, "--apply")
	if code != audit.ExitClean {
		t.Fatalf("apply: exit %d, actions %+v, refused %+v", code, rep.Actions, rep.Refused)
	}
	for _, a := range rep.Actions {
		if a.Outcome != "done" {
			t.Errorf("action %+v not done", a)
		}
	}
	code, rep, _ = w.run(false, "--live", live)
	if code != audit.ExitClean {
		t.Fatalf("audit after repair: exit %d, %+v", code, rep.Findings)
	}
	snap, err := calicosim.State(context.Background(), w.cli())
	if err != nil {
		t.Fatal(err)
	}
	if al, ok := snap.Lookup(mustAddr(early)); !ok || al.Handle != "net1.c2" {
		t.Errorf("early-released address after repair: %+v, %v; want it under net1.c2", al, ok)
	}
	if incs := snap.Inconsistencies(); len(incs) != 0 {
		t.Errorf("simulator sees inconsistencies: %v", incs)
	}
}

func TestRepairFailsClosed(t *testing.T) {
	w := newWorld(t)
	ip := w.allocate(blk, "node1", "net1.c1", podAttrs("web-1"))
	w.record("net1", "c1", "node1", ip, "web-1")
	w.allocate(blk, "node1", "default.web-0", podAttrs("web-0"))
	w.allocate(blk, "node1", "net1.gone", podAttrs("old"))
	tests := []struct {
		name string
		args []string
		code int
		why  string
	}{
		{"no liveness", nil, audit.ExitFindings, "no liveness source"},
		{"empty source with records on its node", []string{"--live", w.liveFile()}, audit.ExitFindings, "no liveness source"},
		{"source for another node", []string{"--live", w.liveFile(liveness.Running{ContainerID: "x", IfName: "eth0"}), "--node", "node2"}, audit.ExitFindings, "no liveness source covers its node"},
		{"unreadable source", []string{"--live", "/nonexistent/live.json"}, audit.ExitError, ""},
		{"unreadable CNI cache", []string{"--cni-cache", "/nonexistent/results"}, audit.ExitError, ""},
		{"two liveness sources", []string{"--live", w.liveFile(), "--cni-cache", w.t.TempDir()}, audit.ExitError, ""},
		{"a node's CNI cache for every node", []string{"--cni-cache", w.t.TempDir(), "--node", ""}, audit.ExitError, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := w.dump()
			code, rep, _ := w.run(true, append(tt.args, "--apply")...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d", code, tt.code)
			}
			if !reflect.DeepEqual(before, w.dump()) {
				t.Fatal("repair changed etcd")
			}
			if tt.why == "" {
				return
			}
			if len(rep.Refused) == 0 {
				t.Fatalf("nothing refused; actions %+v", rep.Actions)
			}
			for _, r := range rep.Refused {
				if (r.Finding.Kind == audit.Leak || r.Finding.Kind == audit.PodNameHandle) && !strings.Contains(r.Why, tt.why) {
					t.Errorf("refusal %q does not say %q", r.Why, tt.why)
				}
			}
			if len(rep.Actions) != 0 {
				t.Errorf("planned %+v", rep.Actions)
			}
		})
	}
}

func TestAuditUnreachableEtcdExitsTwo(t *testing.T) {
	var stdout, stderr strings.Builder
	code := runCmd([]string{"--etcd-endpoints", "http://127.0.0.1:1", "--timeout", "1s", "--cni-cache="}, &stdout, &stderr, false)
	if code != audit.ExitError || !strings.Contains(stderr.String(), "safe-ipam audit:") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// A calico-ipam writing between repair's read and its Txn is never
// overwritten: the Txn fails, repair re-reads and retries.
func TestRepairLosesRaceAndRetries(t *testing.T) {
	w := newWorld(t)
	early := w.allocate(blk, "node1", "net1.c2", podAttrs("web-2"))
	w.record("net1", "c2", "node1", early, "web-2")
	w.release(blk, "net1.c2")
	pools := []calico.IPPool{calico.NewIPPool("p", mustPrefix("10.244.0.0/24"), 26)}
	alloc := &calicosim.Allocator{Client: w.cli(), Node: "node1"}

	ds := datastore.NewEtcd(w.cli())
	recs := &snapshot.EtcdRecords{Client: w.cli(), Prefix: recordsPrefix}
	snap, err := snapshot.Load(context.Background(), ds, recs, "")
	if err != nil {
		t.Fatal(err)
	}
	live := liveness.NewView("test", "", []liveness.Running{{ContainerID: "c2", IfName: "eth0"}})
	actions, _ := repair.Plan(snap, audit.Analyze(snap, audit.Options{Liveness: live}), live)
	if len(actions) != 1 || actions[0].Kind != repair.Reclaim {
		t.Fatalf("plan %+v", actions)
	}
	var racer atomic.Value
	r := &repair.Repairer{Data: ds, Records: recs, Snap: snap, Live: live, BeforeCommit: func(a repair.Action, attempt int) {
		if attempt == 1 { // a concurrent calico-ipam ADD lands first
			asg, err := alloc.Assign(context.Background(), pools, "net1.racer", podAttrs("racer"))
			if err != nil {
				t.Error(err)
			}
			racer.Store(asg)
		}
	}}
	if err := r.Apply(context.Background(), actions); err != nil {
		t.Fatalf("apply: %v (%+v)", err, actions)
	}
	state, err := calicosim.State(context.Background(), w.cli())
	if err != nil {
		t.Fatal(err)
	}
	asg := racer.Load().(calicosim.Assignment)
	if al, ok := state.Lookup(asg.IP); !ok || al.Handle != "net1.racer" {
		t.Errorf("the concurrent allocation was lost: %+v", al)
	}
	if al, ok := state.Lookup(mustAddr(early)); !ok || al.Handle != "net1.c2" {
		t.Errorf("re-claimed address: %+v", al)
	}
	if asg.IP == mustAddr(early) {
		t.Errorf("the racer got the early-released address %s", early)
	}
}

// The incident, built by the simulator in Calico 2.x mode: two
// incarnations of default/web-0 share a pod-name handle, and the late DEL
// of the old one frees the running one's address.
func TestLegacyLateDelStateFromSimulator(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if err := calicosim.SeedIPPool(ctx, w.cli(), "default-ipv4-ippool", "10.244.0.0/24", 26); err != nil {
		t.Fatal(err)
	}
	pools := []calico.IPPool{calico.NewIPPool("default-ipv4-ippool", mustPrefix("10.244.0.0/24"), 26)}
	alloc := &calicosim.Allocator{Client: w.cli(), Node: "node1"}
	if _, err := alloc.Assign(ctx, pools, "default.web-0", nil); err != nil { // container A
		t.Fatal(err)
	}
	b, err := alloc.Assign(ctx, pools, "default.web-0", nil) // container B
	if err != nil {
		t.Fatal(err)
	}
	liveB := w.liveFile(liveness.Running{ContainerID: "B", IfName: "eth0", PodNamespace: "default", PodName: "web-0", IPs: []string{b.Prefix().String()}})

	code, rep, _ := w.run(false, "--live", liveB)
	f := find(rep.Findings, audit.PodNameHandle)
	if code != audit.ExitFindings || f == nil || f.Count != 2 || f.Releasable {
		t.Fatalf("before the late DEL: exit %d, %+v", code, rep.Findings)
	}
	if _, err := alloc.ReleaseHandle(ctx, "default.web-0"); err != nil { // the late DEL of A
		t.Fatal(err)
	}
	code, rep, _ = w.run(false, "--live", liveB)
	f = find(rep.Findings, audit.EarlyRelease)
	if code != audit.ExitFindings || f == nil || f.Address != b.IP.String() {
		t.Fatalf("after the late DEL: exit %d, %+v; want B's %s early-released", code, rep.Findings, b.IP)
	}
}

// An empty source on a node that still has pod addresses (no records yet,
// as right after installing safe-ipam) is a wrongly mounted one.
func TestEmptySourceNotTrustedBeforeAnyRecord(t *testing.T) {
	w := newWorld(t)
	w.allocate(blk, "node1", "default.web-0", podAttrs("web-0"))
	code, rep, _ := w.run(true, "--live", w.liveFile(), "--apply")
	if code != audit.ExitFindings || len(rep.Actions) != 0 || !strings.Contains(rep.Liveness, "not trusted") {
		t.Fatalf("exit %d, liveness %q, actions %+v", code, rep.Liveness, rep.Actions)
	}
}

// A pod that appears in the liveness source during the settle wait (its
// ADD was finishing during the audit) is not released.
func TestSettleRereadsLiveness(t *testing.T) {
	w := newWorld(t)
	w.allocate(blk, "node1", "net1.c1", podAttrs("web-1"))
	w.record("net1", "c1", "node1", "10.244.0.0", "web-1")
	w.allocate(blk, "node1", "net1.late", podAttrs("late"))
	live := w.liveFile(liveness.Running{ContainerID: "c1", IfName: "eth0"})
	go func() {
		time.Sleep(300 * time.Millisecond)
		data, _ := json.Marshal([]liveness.Running{{ContainerID: "c1", IfName: "eth0"}, {ContainerID: "late", IfName: "eth0"}})
		_ = os.WriteFile(live, data, 0o600)
	}()
	code, rep, _ := w.run(true, "--live", live, "--apply", "--settle", "1s")
	if len(rep.Actions) != 0 || len(rep.Refused) != 1 || !strings.Contains(rep.Refused[0].Why, "no longer supports it") {
		t.Fatalf("exit %d, actions %+v, refused %+v", code, rep.Actions, rep.Refused)
	}
	snap, err := calicosim.State(context.Background(), w.cli())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.AllocationsOf("net1.late")) != 1 {
		t.Fatal("the late pod's address was released")
	}
}

// The incident itself: a running pod's record holds an address that
// Calico handed to another running pod with no record (a node without
// safe-ipam, or before install) is a duplicate, not an early release. A
// stale record (its pod gone) whose address Calico freed or re-used is
// one orphan-record finding, not also an early release (issue 19, item
// 10). A record whose address went to a handle whose owner is not
// running stays an early release.
func TestRecordsAgainstCalicoAreJudgedByWhatRuns(t *testing.T) {
	w := newWorld(t)
	// Calico has each address under another handle than the record's.
	shared := w.allocate(blk, "node1", "net1.c7", podAttrs("other-7"))
	w.record("net1", "c6", "node1", shared, "web-6")
	early := w.allocate(blk, "node1", "net1.c10", podAttrs("gone-10"))
	w.record("net1", "c9", "node1", early, "web-9")
	stale := w.allocate(blk, "node1", "net1.c8", podAttrs("web-8"))
	w.record("net1", "c8", "node1", stale, "web-8")
	w.release(blk, "net1.c8")
	live := w.liveFile(liveness.Running{ContainerID: "c6", IfName: "eth0"}, liveness.Running{ContainerID: "c7", IfName: "eth0"},
		liveness.Running{ContainerID: "c9", IfName: "eth0"})
	_, rep, _ := w.run(false, "--live", live, "--min-age", "0s")
	at := map[string][]audit.Kind{}
	for _, f := range rep.Findings {
		at[f.Address] = append(at[f.Address], f.Kind)
	}
	for _, tt := range []struct {
		addr string
		want []audit.Kind
	}{
		{shared, []audit.Kind{audit.Duplicate}},
		{stale, []audit.Kind{audit.OrphanRecord}},             // bare, as every address of a report (issue 22)
		{early, []audit.Kind{audit.EarlyRelease, audit.Leak}}, // and c10's own handle, not running, leaks
	} {
		if !reflect.DeepEqual(at[tt.addr], tt.want) {
			t.Errorf("%s: findings %v, want %v\n%+v", tt.addr, at[tt.addr], tt.want, rep.Findings)
		}
	}
}

// A stale record (its attachment positively gone: no DEL or GC of it will
// come) is forgotten by repair --apply, with its address index entry,
// once what Calico holds under its own handle is released, as its DEL
// would. A record the source lists stays. Repair refused it before ("the
// runtime's DEL or GC removes it"), which never happens (issue 19, item
// 10).
func TestRepairForgetsAStaleRecord(t *testing.T) {
	w := newWorld(t)
	stale := w.allocate(blk, "node1", "net1.c5", podAttrs("web-5"))
	st := etcdstore.NewWithClient(w.cli(), recordsPrefix, "node1", 5*time.Second)
	rec := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "c5", IfName: "eth0"}, PodNamespace: "default",
		PodName: "web-5", Node: "node1", Handle: "net1.c5", State: record.Committed, IPs: []string{stale + "/26"}, Created: time.Now().Add(-time.Hour), Updated: time.Now().Add(-time.Hour)}
	if _, err := st.Commit(context.Background(), nil, rec); err != nil { // with its address index entry
		t.Fatal(err)
	}
	if index, _ := w.etcd.Dump(etcdstore.AddressPrefix(recordsPrefix, "")); len(index) != 1 {
		t.Fatalf("index before repair: %v", index)
	}
	kept := w.allocate(blk, "node1", "net1.c6", podAttrs("web-6"))
	w.record("net1", "c6", "node1", kept, "web-6")
	live := w.liveFile(liveness.Running{ContainerID: "c6", IfName: "eth0", PodNamespace: "default", PodName: "web-6"})

	code, rep, _ := w.run(true, "--live", live)
	if code != audit.ExitFindings || len(rep.Actions) != 2 || rep.Actions[0].Kind != repair.ReleaseHandle || rep.Actions[0].Handle != "net1.c5" ||
		rep.Actions[1].Kind != repair.ForgetRecord || rep.Actions[1].Record != "net1/c5/eth0" {
		t.Fatalf("dry run: exit %d, actions %+v, refused %+v", code, rep.Actions, rep.Refused)
	}
	if _, rep, _ = w.run(true, "--live", live, "--apply"); len(rep.Actions) != 2 || rep.Actions[0].Outcome != "done" || rep.Actions[1].Outcome != "done" {
		t.Fatalf("apply: actions %+v, refused %+v", rep.Actions, rep.Refused)
	}
	recs, err := st.List(context.Background(), "net1")
	if err != nil || len(recs) != 1 || recs[0].ContainerID != "c6" {
		t.Fatalf("records after repair: %v (%v); want c6 only", recs, err)
	}
	if h := w.handle("net1.c5"); h.Block[blk] != 0 {
		t.Errorf("Calico's handle net1.c5 after repair: %+v; want it released with the record", h)
	}
	index, err := w.etcd.Dump(etcdstore.AddressPrefix(recordsPrefix, ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(index) != 0 {
		t.Errorf("index entries of the forgotten record are left: %v", index)
	}
}

// Issue 41, item 2.1 (severity 1): two machines under one Calico node
// name (a stale nodename) share node1's records in etcd. This machine's
// runtime says nothing of the other machine's sandboxes, so a record the
// other host wrote is never forgotten on its word (nor is its quarantine
// released): repair refuses it, as GC, gc and doctor keep it, and the
// running pod's address stays fenced.
func TestRepairKeepsAnotherHostsRecord(t *testing.T) {
	w := newWorld(t)
	ip := w.allocate(blk, "node1", "net1.theirs", podAttrs("web-7"))
	st := etcdstore.NewWithClient(w.cli(), recordsPrefix, "node1", 5*time.Second)
	old := time.Now().Add(-time.Hour)
	rec := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "theirs", IfName: "eth0"}, PodNamespace: "default",
		PodName: "web-7", Node: "node1", Host: "other-machine", Handle: "net1.theirs", State: record.Committed, IPs: []string{ip + "/26"}, Created: old, Updated: old}
	if _, err := st.Commit(context.Background(), nil, rec); err != nil {
		t.Fatal(err)
	}
	kept := w.allocate(blk, "node1", "net1.c6", podAttrs("web-6"))
	w.record("net1", "c6", "node1", kept, "web-6")
	live := w.liveFile(liveness.Running{ContainerID: "c6", IfName: "eth0", PodNamespace: "default", PodName: "web-6"})
	_, rep, _ := w.run(true, "--live", live, "--apply")
	for _, a := range rep.Actions {
		if a.Record == "net1/theirs/eth0" || a.Handle == "net1.theirs" {
			t.Fatalf("repair acted on another host's record: %+v", a)
		}
	}
	var refused string
	for _, r := range rep.Refused {
		if slices.Contains(r.Finding.Records, "net1/theirs/eth0") {
			refused = r.Why
		}
	}
	if !strings.Contains(refused, "written by host other-machine") {
		t.Errorf("refused %+v; want the other host's record refused, naming the host", rep.Refused)
	}
	recs, err := st.List(context.Background(), "net1")
	if err != nil || len(recs) != 2 {
		t.Fatalf("records after repair: %v (%v); want both", recs, err)
	}
}

// Issue 21: a KubeVirt VM's handle is never read as a container's (a leak
// when no source lists "vmi.default.vm1") nor as a pod name's: without
// its VM it is unverified, and repair leaves it allocated.
func TestVMHandleIsNeverALeak(t *testing.T) {
	for _, handle := range []string{"net1.vmi.default.vm1", "k8s-pod-network.vmi.default.vm2", "net1.vmi._0123456789abcdef"} {
		t.Run(handle, func(t *testing.T) {
			w := newWorld(t)
			ip := w.allocate(blk, "node1", "net1.c1", podAttrs("web-0"))
			w.record("net1", "c1", "node1", ip, "web-0")
			vm := w.allocate(blk, "node1", handle, podAttrs("virt-launcher-vm1-abcde"))
			live := w.liveFile(liveness.Running{ContainerID: "c1", IfName: "eth0"})
			_, rep, stderr := w.run(false, "--live", live)
			var found *audit.Finding
			for i, f := range rep.Findings {
				if f.Handle == handle {
					found = &rep.Findings[i]
				}
			}
			if found == nil || found.Kind != audit.Unverified || found.Releasable {
				t.Fatalf("finding for %s = %+v; want unverified, not releasable (%s)", handle, found, stderr)
			}
			w.run(true, "--live", live, "--apply")
			if h := w.handle(handle); h == nil || h.Block[blk] != 1 {
				t.Fatalf("repair --apply released the VM's address %s: handle %+v", vm, h)
			}
		})
	}
}

// Issue 22: a named source that was not trusted (an empty --live file
// while the node holds records and addresses) judged nothing: the audit is
// not clean, and says so, counting records and addresses apart.
func TestUntrustedSourceIsNeverClean(t *testing.T) {
	w := newWorld(t)
	ip := w.allocate(blk, "node1", "net1.c1", podAttrs("web-0"))
	w.record("net1", "c1", "node1", ip, "web-0")
	code, rep, _ := w.run(false, "--live", w.liveFile())
	if code != audit.ExitFindings || rep.Untrusted == "" || !strings.Contains(rep.Liveness, "1 records and 1 pod addresses") {
		t.Fatalf("audit with an empty source: exit %d, untrusted %q, liveness %q; want exit 1, untrusted, counts apart", code, rep.Untrusted, rep.Liveness)
	}
}
