package guard_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook/rulebooktest"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
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

// Issue 41, item 1: the rulebook's death rows through the ADD handed an
// address a committed record of another node holds (kube-controllers
// freed it): the ADD settles the holder, and succeeds, exactly when the
// rulebook lets the record go; otherwise it is fenced (11).
func TestAddAnswersTheRulebooksDeathRows(t *testing.T) {
	for _, row := range rulebooktest.DeathRows {
		if row.State != record.Committed {
			continue
		}
		t.Run(row.Name, func(t *testing.T) {
			r := newRig(t, "etcd")
			etcd := sharedEtcd.get(t)
			r.calicoEtcd = etcd.Endpoint()
			holder, alive := "holder"+r.prefix[1:], "here"+r.prefix[1:]
			if row.Known {
				if _, err := etcd.Client().Put(context.Background(), calico.NodeKey(holder), `{"kind":"Node"}`); err != nil {
					t.Fatal(err)
				}
			}
			r.node = holder
			r.add("holder")
			r.freeBehindBack("net1.holder")
			if row.Noted >= 0 {
				if err := r.store().(store.Cluster).NoteGone(context.Background(), "net1", holder, row.Noted); err != nil {
					t.Fatal(err)
				}
			}
			r.node = alive
			_, err := r.run("ADD", env("new"), r.conf())
			if settled := err == nil; settled != row.Release {
				t.Fatalf("ADD = %v: settled %v, the rulebook says %v", err, settled, row.Release)
			}
			if !row.Release && cniCode(err) != types.ErrTryAgainLater {
				t.Fatalf("ADD = %v; want fenced, code 11", err)
			}
		})
	}
}
