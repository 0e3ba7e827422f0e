package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// quarantined commits a holder of 10.0.0.1/26 and quarantines late's
// allocation of it with the holder, as fencing does; it returns both
// attachments.
func quarantined(t *testing.T, s *Store) (holder, late record.Attachment) {
	t.Helper()
	ctx := context.Background()
	commit := func(cid string) (*record.Record, error) {
		att := record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"}
		p, err := s.Swap(ctx, att, nil, &record.Record{Attachment: att, Node: "node1", Handle: "net1." + cid, State: record.Pending, Created: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		c := *p
		c.State, c.IPs = record.Committed, []string{"10.0.0.1/26"}
		_, err = s.Commit(ctx, p, &c)
		return p, err
	}
	if _, err := commit("holder"); err != nil {
		t.Fatal(err)
	}
	p, err := commit("late")
	var held *store.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("commit = %v; want held", err)
	}
	if err := s.Quarantine(ctx, p, held.Holder, record.Quarantine{Attachment: p.Attachment, IPs: []string{"10.0.0.1/26"}}); err != nil {
		t.Fatal(err)
	}
	return held.Holder.Attachment, p.Attachment
}

// openQuarantined opens a store in a new directory, with a quarantine.
func openQuarantined(t *testing.T) (s *Store, holder, late record.Attachment) {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "records"))
	if err != nil {
		t.Fatal(err)
	}
	holder, late = quarantined(t, s)
	return s, holder, late
}

func listsQuarantine(rec *record.Record, att record.Attachment) bool {
	return rec != nil && len(rec.Quarantined) == 1 && rec.Quarantined[0].Attachment == att
}

// marksLeft lists the quarantine marks in net1's directory.
func marksLeft(t *testing.T, s *Store) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(s.networkDir("net1"), "q:*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// Issue 31, item 6: a power loss that empties the holder's record (its
// last write synced its name, not its data) leaves the quarantine's mark
// and no record listing it. The holder reads as damaged, with the
// quarantines whose marks name it, so its DEL or GC releases them and
// nothing is left; the quarantined attachment's DEL still answers from
// the quarantine meanwhile. Before, the damaged holder listed none: its
// DEL dropped the record and left the mark, and the allocation was never
// released.
func TestTornHolderKeepsItsQuarantines(t *testing.T) {
	ctx := context.Background()
	for _, by := range []string{"DEL", "GC"} {
		t.Run(by, func(t *testing.T) {
			s, holder, late := openQuarantined(t)
			err := os.WriteFile(s.path(holder), nil, 0o600) // the power loss
			if err != nil {
				t.Fatal(err)
			}
			if got, err := s.Get(ctx, holder); err != nil || !listsQuarantine(got, late) {
				t.Fatalf("the torn holder = %+v, %v; want it to stand in with late's quarantine", got, err)
			}
			if _, err := s.MarkReleasing(ctx, &record.Record{Attachment: late, Node: "node1"}); !errors.Is(err, store.ErrQuarantined) {
				t.Fatalf("late's DEL: %v; want ErrQuarantined while the holder is not released", err)
			}
			var marked *record.Record
			if by == "DEL" {
				marked, err = s.MarkReleasing(ctx, &record.Record{Attachment: holder, Node: "node1", Updated: time.Now()})
			} else {
				recs, _ := s.List(ctx, "net1")
				if len(recs) != 1 || !listsQuarantine(recs[0], late) {
					t.Fatalf("GC lists %+v; want the torn holder with late's quarantine", recs)
				}
				marked, err = s.Swap(ctx, holder, recs[0], store.Releasing(recs[0], time.Now()))
			}
			if err != nil || !listsQuarantine(marked, late) {
				t.Fatalf("the holder's %s marks %+v, %v; want late's quarantine to release", by, marked, err)
			}
			// The guard releases the quarantine in the delegate, then forgets it and the holder.
			left, err := s.Unquarantine(ctx, marked, marked.Quarantined)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Swap(ctx, holder, left, nil); err != nil {
				t.Fatal(err)
			}
			if m := marksLeft(t, s); len(m) != 0 {
				t.Errorf("marks left: %v", m)
			}
			if _, err := s.Swap(ctx, late, nil, &record.Record{Attachment: late, State: record.Pending}); err != nil {
				t.Errorf("late after its holder was released: %v; want no quarantine", err)
			}
		})
	}
}

// A mark whose holder is gone, or no longer lists it, is what a crash or
// power loss leaves between Quarantine's or Unquarantine's writes; nothing
// holds its allocation for a running attachment. It must not fence the
// attachment for ever: the attachment's DEL removes it and releases the
// allocation (MarkReleasing finds no record and no quarantine).
func TestMarkWithoutHolderGoes(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{"holder gone", "holder lists no quarantine"} {
		t.Run(how, func(t *testing.T) {
			s, holder, late := openQuarantined(t)
			var err error
			if how == "holder gone" {
				err = os.Remove(s.path(holder))
			} else {
				h, _ := s.Get(ctx, holder)
				h.Quarantined = nil
				err = s.write(h)
			}
			if err != nil {
				t.Fatal(err)
			}
			if m, err := s.MarkReleasing(ctx, &record.Record{Attachment: late, Node: "node1"}); m != nil || err != nil {
				t.Fatalf("late's DEL = %+v, %v; want no record and no quarantine", m, err)
			}
			if m := marksLeft(t, s); len(m) != 0 {
				t.Errorf("marks left: %v", m)
			}
		})
	}
}
