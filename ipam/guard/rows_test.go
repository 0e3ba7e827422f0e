package guard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook/rulebooktest"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// Issue 41, item 1: the rulebook's rows, through the GC verb (the
// runtime's own list, which does not lag) over each store: a record goes
// exactly when the rulebook says so.
func TestGCAnswersTheRulebooksRows(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		_, shared := r.store().(store.Cluster)
		want := map[string]bool{}
		valid := []string{"other"}
		for i, row := range rulebooktest.Rows {
			if !row.For(false, shared) {
				continue
			}
			cid := fmt.Sprintf("row%d", i)
			if _, err := r.store().Swap(context.Background(), row.Record(r.node, cid, i, time.Now()).Attachment, nil, row.Record(r.node, cid, i, time.Now())); err != nil {
				t.Fatal(err)
			}
			if row.Listed {
				valid = append(valid, cid)
			}
			want[cid] = row.Release
		}
		if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf(), valid...)); err != nil {
			t.Fatalf("GC: %v", err)
		}
		for i, row := range rulebooktest.Rows {
			cid := fmt.Sprintf("row%d", i)
			if release, ok := want[cid]; ok && (r.record(cid) == nil) != release {
				t.Errorf("%s: released %v, the rulebook says %v", row.Name, r.record(cid) == nil, release)
			}
		}
	})
}
