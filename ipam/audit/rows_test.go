package audit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook/rulebooktest"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
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
