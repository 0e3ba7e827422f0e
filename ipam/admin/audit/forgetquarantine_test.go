package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/repair"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Repair's forget-record of a stale holder releases the allocations
// quarantined with it, as the holder's DEL would have: nothing else ever
// will, since the quarantined attachment's DEL answers from the
// quarantine and, the record forgotten, no audit ties the allocation to
// anything (issue 31, item 6). It dropped the quarantines' keys and left
// the allocations.
func TestRepairForgetReleasesQuarantines(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// c5's address was freed behind its back and handed to c7's ADD,
	// which fencing quarantined with c5; then c5's sandbox went without
	// a DEL.
	addr := w.allocate(blk, "node1", "net1.c7", podAttrs("web-7"))
	st := etcdstore.NewWithClient(w.cli(), recordsPrefix, "node1", 5*time.Second)
	holder := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "c5", IfName: "eth0"}, PodNamespace: "default",
		PodName: "web-5", Node: "node1", Handle: "net1.c5", State: record.Committed, IPs: []string{addr + "/26"}, Created: time.Now().Add(-time.Hour), Updated: time.Now().Add(-time.Hour)}
	holder, err := st.Commit(ctx, nil, holder)
	if err != nil {
		t.Fatal(err)
	}
	late := record.Attachment{Network: "net1", ContainerID: "c7", IfName: "eth0"}
	p, err := st.Swap(ctx, late, nil, &record.Record{Attachment: late, Node: "node1", Handle: "net1.c7", State: record.Pending, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Quarantine(ctx, p, holder, record.Quarantine{Attachment: late, IPs: []string{addr + "/26"}}); err != nil {
		t.Fatal(err)
	}
	live := w.liveFile(liveness.Running{ContainerID: "c6", IfName: "eth0"})

	_, rep, _ := w.run(true, "--live", live, "--apply")
	var released, forgot bool
	for _, a := range rep.Actions {
		switch {
		case a.Kind == repair.ReleaseHandle && a.Handle == "net1.c7":
			released = a.Outcome == "done" && !forgot // released before the record goes
		case a.Kind == repair.ForgetRecord && a.Record == "net1/c5/eth0":
			forgot = a.Outcome == "done"
		}
	}
	if !released || !forgot {
		t.Fatalf("repair --apply: actions %+v, refused %+v; want the quarantine of net1.c7 released, then c5 forgotten", rep.Actions, rep.Refused)
	}
	if h := w.handle("net1.c7"); h.Block[blk] != 0 {
		t.Errorf("Calico's handle net1.c7 after repair: %+v; the quarantined allocation must be released", h)
	}
	if left, _ := w.etcd.Dump(etcdstore.QuarantinePrefix(recordsPrefix, "")); len(left) != 0 {
		t.Errorf("quarantine keys left: %v", left)
	}
	if _, err := st.Swap(ctx, late, nil, &record.Record{Attachment: late, Node: "node1", State: record.Pending}); errors.Is(err, store.ErrQuarantined) {
		t.Errorf("c7 is still quarantined after its holder was forgotten")
	}
	if _, rep, _ := w.run(true, "--live", live); len(rep.Actions) != 0 || kinds(rep.Findings)[audit.Leak] != 0 {
		t.Errorf("after repair: actions %+v, findings %+v; want nothing left", rep.Actions, rep.Findings)
	}
}

// Repair's forget-record of a record whose container is gone releases
// what Calico holds under the record's own handle first, as its DEL would
// have. It left the allocation for "the next audit", which, with a
// node-local source and no owner attributes (safe-ipam over Calico 2.x
// keys by bare container ID, and Calico 2.x writes none), can never judge
// it: the chaos history repair/borrowed-block/legacy found the leak.
func TestRepairForgetReleasesTheRecordsOwnHandle(t *testing.T) {
	for _, handle := range []string{"c5", "net1.c5"} {
		t.Run(handle, func(t *testing.T) {
			w := newWorld(t)
			ctx := context.Background()
			addr := w.allocate(blk, "node1", handle, nil)
			st := etcdstore.NewWithClient(w.cli(), recordsPrefix, "node1", 5*time.Second)
			rec := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "c5", IfName: "eth0"}, PodNamespace: "default",
				PodName: "web-5", Node: "node1", Handle: handle, State: record.Committed, IPs: []string{addr + "/26"}, Created: time.Now().Add(-time.Hour), Updated: time.Now().Add(-time.Hour)}
			if _, err := st.Commit(ctx, nil, rec); err != nil {
				t.Fatal(err)
			}
			live := w.liveFile(liveness.Running{ContainerID: "c6", IfName: "eth0", PodNamespace: "default", PodName: "web-6"})
			_, rep, _ := w.run(true, "--live", live, "--network", "net1", "--min-age", "0", "--apply")
			if h := w.handle(handle); h.Block[blk] != 0 {
				t.Fatalf("Calico's handle %s after repair: %+v; actions %+v, refused %+v; want it released with the record", handle, h, rep.Actions, rep.Refused)
			}
			if recs, err := st.List(ctx, "net1"); err != nil || len(recs) != 0 {
				t.Fatalf("records after repair: %v (%v); want c5's forgotten", recs, err)
			}
		})
	}
}
