package guard_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// fullDisk is a store on a full disk: every write fails with ENOSPC;
// deleting a record may still work (the file store's is an unlink).
type fullDisk struct {
	store.Store
	deletes bool
}

func (f *fullDisk) MarkReleasing(context.Context, *record.Record) (*record.Record, error) {
	return nil, fmt.Errorf("writing the releasing mark: %w", syscall.ENOSPC)
}

func (f *fullDisk) Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	if next != nil || !f.deletes {
		return nil, fmt.Errorf("writing %s: %w", att, syscall.ENOSPC)
	}
	return f.Store.Swap(ctx, att, prev, next)
}

// Issue 31, item 8: DEL on a store that cannot write its releasing mark
// still ends the pod's teardown when the release is provably safe: the
// record holds its addresses under the container's own handle, which the
// release by container frees and nothing else. The delegate frees the
// handle; the record is forgotten, or, when even deleting fails, stays
// until a GC forgets it once the store takes writes. A record under
// another handle (a pod name's) still fails, as before.
func TestDelOnAFullDiskReleasesTheContainersOwnHandle(t *testing.T) {
	tests := []struct {
		name       string
		deletes    bool
		recordLeft bool
	}{
		{"the record can be deleted", true, false},
		{"nothing can be written", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, r *rig) {
				r.cniVersion = "1.1.0"
				r.add("c1")
				g := r.guardOver(&fullDisk{Store: r.store(), deletes: tt.deletes}, r.conf())
				if err := g.Del(context.Background(), env("c1")); err != nil {
					t.Fatalf("DEL on a full disk: %v; want success", err)
				}
				if held := r.held()["net1.c1"]; len(held) != 0 {
					t.Fatalf("the container's handle still holds %v", held)
				}
				if rec := r.record("c1"); (rec != nil) != tt.recordLeft {
					t.Fatalf("record after DEL: %+v; want left %v", rec, tt.recordLeft)
				}
				if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
					t.Fatalf("GC once the store takes writes: %v", err)
				}
				if rec := r.record("c1"); rec != nil {
					t.Fatalf("the GC kept the record: %+v", rec)
				}
			})
		})
	}
}

// The control: a record whose addresses are under a pod-name handle (an
// adopted one) proves nothing about what the release frees: DEL fails
// without its mark, and the runtime retries.
func TestDelOnAFullDiskKeepsAPodNameHandle(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.add("c1")
		rec := r.record("c1")
		adopted := *rec
		adopted.Handle = "default.web-0"
		if _, err := r.store().Swap(context.Background(), rec.Attachment, rec, &adopted); err != nil {
			t.Fatal(err)
		}
		dels := len(r.calls("DEL"))
		g := r.guardOver(&fullDisk{Store: r.store(), deletes: true}, r.conf())
		if err := g.Del(context.Background(), env("c1")); err == nil || len(r.calls("DEL")) != dels {
			t.Fatalf("DEL of a pod-name handle's record on a full disk: %v, %d delegate DELs; want an error and none", err, len(r.calls("DEL"))-dels)
		}
	})
}
