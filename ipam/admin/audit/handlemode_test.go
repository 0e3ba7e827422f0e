package audit_test

import (
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// A record as safe-ipam writes it in each delegateHandles mode, over
// Calico data the simulator writes for the generation in front of it.
func TestWrongDelegateHandlesIsWarned(t *testing.T) {
	tests := []struct {
		name         string
		generation   calicosim.HandleMode
		podArgs      bool   // whether pod identity reached calico-ipam on ADD
		recordHandle string // "" for <network>.<containerID>
		// seen is a pod calico-ipam allocated for with the pod in view
		// (not behind safe-ipam), keyed as generation keys it: what tells
		// a Calico 3.x from a build that keys by pod name.
		seen         bool
		warning      string
		earlyRelease bool
	}{
		{"pod mode in front of Calico 3.x", calicosim.ModernHandles, false, "c1", true, `delegateHandles is "pod"`, false},
		// Nothing shows how calico-ipam keys a pod it sees: no alarm (a
		// build that keys by pod name looks the same here).
		{"pod mode, nothing calico-ipam keyed with the pod in view", calicosim.ModernHandles, false, "c1", false, "", false},
		{"container mode in front of Calico 2.x", calicosim.LegacyHandles, true, "", false, `delegateHandles is "container"`, true},
		{"pod mode in front of Calico 2.x", calicosim.LegacyHandles, false, "c1", true, "", false},
		{"container mode in front of Calico 3.x", calicosim.ModernHandles, true, "", true, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			ns, pod := "", ""
			if tt.podArgs {
				ns, pod = "default", "web-0"
			}
			ip := w.simAddArgs(tt.generation, "c1", ns, pod)
			if tt.seen {
				w.simAddArgs(tt.generation, "c2", "default", "web-1")
			}
			rec := &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: "c1", IfName: "eth0"},
				PodNamespace: "default", PodName: "web-0", Node: "node1", Handle: "k8s-pod-network.c1", State: record.Committed,
				IPs: []string{ip + "/26"}, Created: time.Now(), Updated: time.Now()}
			if tt.recordHandle != "" {
				rec.Handle = tt.recordHandle
			}
			s := etcdstore.NewWithClient(w.cli(), recordsPrefix, "node1", 5*time.Second)
			if _, err := s.Swap(context.Background(), rec.Attachment, nil, rec); err != nil {
				t.Fatal(err)
			}
			_, rep, _ := w.run(false)
			warned := strings.Join(rep.Warnings, "\n")
			if (tt.warning == "") != (warned == "") || !strings.Contains(warned, tt.warning) {
				t.Fatalf("warnings %q, want %q", rep.Warnings, tt.warning)
			}
			if got := find(rep.Findings, audit.EarlyRelease) != nil; got != tt.earlyRelease {
				t.Fatalf("early-release found %v, want %v: %+v", got, tt.earlyRelease, rep.Findings)
			}
		})
	}
}

// A quarantine is reported with both attachments, and its handle belongs
// to the holder: repair must not take it for a leak of the fenced
// attachment, which never ran, and release the holder's address.
func TestQuarantineIsReportedAndNeverReleased(t *testing.T) {
	w := newWorld(t)
	ip := w.allocate(blk, "node1", "net1.late", podAttrs("web-1"))
	holder := w.record("net1", "holder", "node1", ip, "web-0") // its own allocation was freed behind its back
	s := etcdstore.NewWithClient(w.cli(), recordsPrefix, "node1", 5*time.Second)
	att := record.Attachment{Network: "net1", ContainerID: "late", IfName: "eth0"}
	p, err := s.Swap(context.Background(), att, nil, &record.Record{Attachment: att, Node: "node1", State: record.Pending, Handle: "net1.late"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Quarantine(context.Background(), p, holder, record.Quarantine{Attachment: att, IPs: []string{ip + "/26"}}); err != nil {
		t.Fatal(err)
	}
	live := w.liveFile(liveness.Running{ContainerID: "holder", IfName: "eth0", PodNamespace: "default", PodName: "web-0", IPs: []string{ip + "/26"}})
	before := w.dump()
	code, rep, _ := w.run(true, "--live", live, "--min-age", "0", "--apply")
	f := find(rep.Findings, audit.Quarantine)
	if f == nil || f.Address != ip || len(f.Records) != 2 || f.Records[1] != "net1/late/eth0" {
		t.Fatalf("findings %+v; want a quarantine naming both attachments", rep.Findings)
	}
	if code != audit.ExitClean || len(rep.Findings) != 1 || len(rep.Actions) != 0 {
		t.Fatalf("exit %d, findings %+v, actions %+v; want the quarantine alone, informational", code, rep.Findings, rep.Actions)
	}
	if !reflect.DeepEqual(before, w.dump()) {
		t.Fatal("repair changed etcd")
	}
}

// A snapshot built by hand (as tools and tests build one) numbers no
// handle: the warning still comes.
func TestModeWarningsOfASnapshotBuiltByHand(t *testing.T) {
	snap := &snapshot.Snapshot{
		Allocations: snapshot.NewAllocations(snapshot.Allocation{Addr: netip.MustParseAddr("10.0.0.1"), Handle: "ns.web"}),
		Records: []*record.Record{{Attachment: record.Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}, Handle: "n.c",
			State: record.Committed, PodNamespace: "ns", PodName: "web", IPs: []string{"10.0.0.1/26"}}},
	}
	if w := audit.ModeWarnings(snap); len(w) != 1 || !strings.Contains(w[0], `delegateHandles is "container"`) {
		t.Errorf("warnings %q; want the container mode's", w)
	}
}
