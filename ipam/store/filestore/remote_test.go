package filestore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// A quarantine for another node's holder: the mark takes the pending
// record's place and fences the attachment (its re-ADD and its DEL) until
// it is forgotten; a gc round's note changes it only from what it read.
func TestRemoteQuarantineMark(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	att := record.Attachment{Network: "net1", ContainerID: "fenced", IfName: "eth0"}
	now := time.Now().UTC()
	pending, err := s.Swap(ctx, att, nil, &record.Record{Attachment: att, Node: "node2", State: record.Pending, Created: now, Updated: now})
	if err != nil {
		t.Fatal(err)
	}
	m := record.RemoteQuarantine{Quarantine: record.Quarantine{Attachment: att, IPs: []string{"10.0.0.5/32"}}, Claim: "net1.10.0.0.5",
		Holder: record.Peer{Attachment: record.Attachment{Network: "net1", ContainerID: "holder", IfName: "eth0"}, Node: "node1"}, HolderHost: "m1"}
	stale := *pending
	stale.Revision--
	if err := s.QuarantineFor(ctx, &stale, m); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("QuarantineFor over a changed pending: %v; want ErrConflict", err)
	}
	if err := s.QuarantineFor(ctx, pending, m); err != nil {
		t.Fatal(err)
	}
	// A crash, or a power loss, that undid the pending record's removal:
	// its DEL finishes the removal instead of releasing the allocation.
	if err := s.writeAs(pending, unsynced); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkReleasing(ctx, &record.Record{Attachment: att, Node: "node2"}); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("a DEL of the quarantine's leftover pending record: %v; want ErrQuarantined", err)
	}
	if err := s.writeAs(pending, unsynced); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Swap(ctx, att, pending, nil); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("an ADD's takeover of the quarantine's leftover pending record: %v; want ErrQuarantined", err)
	}
	if rec, err := s.Get(ctx, att); err != nil || rec != nil {
		t.Fatalf("the pending record after the quarantine: %+v, %v; want it gone", rec, err)
	}
	if _, err := s.Swap(ctx, att, nil, pending); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("a re-ADD of the quarantined attachment: %v; want ErrQuarantined", err)
	}
	if _, err := s.MarkReleasing(ctx, &record.Record{Attachment: att, Node: "node2"}); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("a DEL of the quarantined attachment: %v; want ErrQuarantined", err)
	}
	marks, err := s.RemoteQuarantines(ctx, "net1")
	if err != nil || len(marks) != 1 || marks[att].Claim != m.Claim || marks[att].HolderHost != "m1" {
		t.Fatalf("RemoteQuarantines = %+v, %v", marks, err)
	}
	noted := marks[att]
	noted.GoneSince = &now
	if err := s.UpdateRemote(ctx, att, m, noted); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetRemote(ctx, att, m); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ForgetRemote of the mark as it was before the note: %v; want ErrConflict", err)
	}
	marks, _ = s.RemoteQuarantines(ctx, "net1")
	if err := s.ForgetRemote(ctx, att, marks[att]); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetRemote(ctx, att, marks[att]); err != nil {
		t.Fatalf("forgetting a mark forgotten already: %v; want done", err)
	}
	if _, err := s.Swap(ctx, att, nil, pending); err != nil {
		t.Fatalf("a re-ADD once the mark is forgotten: %v", err)
	}
	if recs, err := s.List(ctx, "net1"); err != nil || len(recs) != 1 {
		t.Fatalf("List = %v, %v; want the one record (a mark is no record)", recs, err)
	}
}
