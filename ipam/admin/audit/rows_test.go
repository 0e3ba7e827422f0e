package audit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook/rulebooktest"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 41, item 1: the rulebook's rows, through audit and repair --apply
// (a liveness source, which lags, over the etcd store, forgetting): a
// record is forgotten exactly when the rulebook says so.
func TestRepairAnswersTheRulebooksRows(t *testing.T) {
	w := newWorld(t)
	st := etcdstore.NewWithClient(w.cli(), recordsPrefix, "node1", 5*time.Second)
	want := map[string]bool{}
	live := []liveness.Running{{ContainerID: "other", IfName: "eth0"}}
	for i, row := range rulebooktest.Rows {
		if !row.For(true, true) {
			continue
		}
		cid := fmt.Sprintf("row%d", i)
		rec := row.Record("node1", cid, i, time.Now())
		if _, err := st.Swap(context.Background(), rec.Attachment, nil, rec); err != nil {
			t.Fatal(err)
		}
		if row.Listed {
			live = append(live, liveness.Running{ContainerID: cid, IfName: "eth0"})
		}
		want[cid] = row.Want(true)
	}
	_, rep, stderr := w.run(true, "--live", w.liveFile(live...), "--min-age", rulebooktest.Grace.String(), "--apply")
	recs, err := st.List(context.Background(), "net1")
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, rec := range recs {
		left[rec.ContainerID] = true
	}
	for i, row := range rulebooktest.Rows {
		cid := fmt.Sprintf("row%d", i)
		if forget, ok := want[cid]; ok && left[cid] == forget {
			t.Errorf("%s: forgotten %v, the rulebook says %v; actions %+v refused %+v\n%s", row.Name, !left[cid], forget, rep.Actions, rep.Refused, stderr)
		}
	}
}

// Review of issue 41, item 2.1: an etcd store read for one node (--conf
// names it, with Calico's Kubernetes datastore) still holds other
// machines' records: another host's record is never releasable on this
// machine's listing. A file store holds this machine's alone.
func TestAnotherHostsRecordReadForOneNode(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	rec := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "theirs", IfName: "eth0"}, Node: "node1", Host: "other-machine",
		Handle: "net1.theirs", State: record.Committed, IPs: []string{"10.0.0.1/26"}, Created: old, Updated: old}
	live := liveness.NewView("a runtime", "node1", []liveness.Running{{ContainerID: "other", IfName: "eth0"}})
	for _, shared := range []bool{true, false} {
		snap := &snapshot.Snapshot{Records: []*record.Record{rec}, RecordsNode: "node1", RecordsShared: shared}
		var orphan *audit.Finding
		for _, f := range audit.Analyze(snap, audit.Options{Liveness: live, MinAge: time.Minute}) {
			if f.Kind == audit.OrphanRecord {
				orphan = &f
			}
		}
		if orphan == nil || orphan.Releasable == shared {
			t.Errorf("shared store %v: orphan finding %+v; want releasable %v", shared, orphan, !shared)
		}
	}
}

// Review of issue 41: a --live file for every node (--node "") names
// attachments cluster-wide and is bound to no machine, so repair judges
// every node's records by it, whichever host wrote them: an orphan
// record of node2 is forgotten.
func TestRepairWithASourceForEveryNodeForgetsOtherNodesOrphans(t *testing.T) {
	w := newWorld(t)
	st := etcdstore.NewWithClient(w.cli(), recordsPrefix, "node2", 5*time.Second)
	old := time.Now().Add(-time.Hour)
	rec := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "gone", IfName: "eth0"}, Node: "node2", Host: "machine-2",
		Handle: "net1.gone", State: record.Committed, IPs: []string{"10.244.0.7/26"}, Created: old, Updated: old}
	if _, err := st.Swap(context.Background(), rec.Attachment, nil, rec); err != nil {
		t.Fatal(err)
	}
	live := w.liveFile(liveness.Running{ContainerID: "other", IfName: "eth0"})
	_, rep, stderr := w.run(true, "--live", live, "--node=", "--apply")
	if recs, err := st.List(context.Background(), "net1"); err != nil || len(recs) != 0 {
		t.Errorf("node2's orphan record after repair with a source for every node: %v, %v; actions %+v refused %+v\n%s", recs, err, rep.Actions, rep.Refused, stderr)
	}
}
