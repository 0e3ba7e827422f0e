package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// RunFencing checks the address index and the quarantines: a commit never
// claims an address another committed record holds, and a quarantined
// allocation is neither released nor reused until its holder goes.
func RunFencing(t *testing.T, open func(t *testing.T) store.Store) {
	runChecks(t, open, []check[store.Store]{
		{"a commit never claims a held address", heldAddress},
		{"a releasing or deleted holder gives its addresses up", releasedHolder},
		{"a quarantine lives and goes with its holder", quarantine},
		{"a quarantine needs the holder unchanged", staleQuarantine},
		{"a mark carries quarantines tied after the read", quarantineAfterRead},
		{"a forget cannot lose a quarantine tied after its read", forgetAfterQuarantine},
		{"a retried mark knows the addresses", retriedMark},
		{"an ADD's takeover drops the quarantines, a retried mark keeps them", takeoverDropsQuarantines},
		{"records written before the index get their entries", reindexOldRecords},
		{"any number of quarantines is forgotten, with the holder unchanged", unquarantineMany},
		{"a record of the same VM takes the entries over, naming their holder", sharedHandle},
	})
}

// commitWith creates a pending record for cid and commits it with ips.
func commitWith(t *testing.T, s store.Store, cid string, ips ...string) (*record.Record, *record.Record, error) {
	t.Helper()
	return commitEdited(t, s, cid, func(c *record.Record) { c.IPs = ips })
}

// commitEdited creates a pending record for cid and commits it as edit
// makes it.
func commitEdited(t *testing.T, s store.Store, cid string, edit func(*record.Record)) (*record.Record, *record.Record, error) {
	t.Helper()
	att := attachment(cid)
	p := pending(att)
	p.Node = "node1"
	p, err := s.Swap(ctx, att, nil, p)
	if err != nil {
		t.Fatalf("create %s: %v", cid, err)
	}
	c := *p
	c.State = record.Committed
	edit(&c)
	out, err := s.Commit(ctx, p, &c)
	return p, out, err
}

// quarantineLate commits "late" with 10.0.0.1/26, which a record holds,
// and quarantines its allocation with that holder; it returns late's
// pending record.
func quarantineLate(t *testing.T, s store.Store) *record.Record {
	t.Helper()
	p, _, err := commitWith(t, s, "late", "10.0.0.1/26")
	var held *store.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("commit = %v; want held", err)
	}
	if err := s.Quarantine(ctx, p, held.Holder, record.Quarantine{Attachment: p.Attachment, IPs: []string{"10.0.0.1/26"}}); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustCommit(t *testing.T, s store.Store, cid string, ips ...string) *record.Record {
	t.Helper()
	_, c, err := commitWith(t, s, cid, ips...)
	if err != nil || c == nil || c.Revision == 0 {
		t.Fatalf("commit %s = %+v, %v", cid, c, err)
	}
	return c
}

func heldAddress(t *testing.T, s store.Store) {
	holder := mustCommit(t, s, "holder", "10.0.0.1/26", "fd00::1/122")
	p, c, err := commitWith(t, s, "late", "10.0.0.9/26", "10.0.0.1/26")
	var held *store.HeldError
	if !errors.As(err, &held) || c != nil || held.Addr != "10.0.0.1/26" || held.Holder.Attachment != holder.Attachment || held.Holder.Revision != holder.Revision {
		t.Fatalf("commit over a held address = %+v, %v; want a HeldError naming %s", c, err, holder.Attachment)
	}
	if got, _ := s.Get(ctx, p.Attachment); got == nil || got.State != record.Pending || got.Revision != p.Revision {
		t.Fatalf("a refused commit changed the pending record: %+v", got)
	}
	// Other addresses, the same address in another family's notation, and
	// the same attachment committing again are fine.
	mustCommit(t, s, "other", "10.0.0.2/26")
	if _, _, err := commitWith(t, s, "v6", "fd00::1/64"); !errors.As(err, &held) {
		t.Fatalf("fd00::1 under another mask: %v; want held", err)
	}
}

func releasedHolder(t *testing.T, s store.Store) {
	holder := mustCommit(t, s, "holder", "10.0.0.1/26")
	m, err := s.MarkReleasing(ctx, marker(holder.Attachment))
	if err != nil || m == nil {
		t.Fatalf("mark = %+v, %v", m, err)
	}
	mustCommit(t, s, "next", "10.0.0.1/26") // its DEL released it
	second := mustCommit(t, s, "second", "10.0.0.3/26")
	if _, err := s.Swap(ctx, second.Attachment, second, nil); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, "third", "10.0.0.3/26")
	// Forgetting the releasing holder leaves the new holder's entry.
	if _, err := s.Swap(ctx, holder.Attachment, m, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := commitWith(t, s, "fourth", "10.0.0.1/26"); err == nil {
		t.Fatal("forgetting an old holder released the new holder's address")
	}
}

func quarantine(t *testing.T, s store.Store) {
	holder := mustCommit(t, s, "holder", "10.0.0.1/26")
	p, _, err := commitWith(t, s, "late", "10.0.0.1/26")
	var held *store.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("commit = %v; want held", err)
	}
	q := record.Quarantine{Attachment: p.Attachment, IPs: []string{"10.0.0.1/26"}}
	if err := s.Quarantine(ctx, p, held.Holder, q); err != nil {
		t.Fatalf("quarantine: %v", err)
	}
	if got, _ := s.Get(ctx, p.Attachment); got != nil {
		t.Fatalf("the quarantined attachment keeps a record: %+v", got)
	}
	if _, err := s.Swap(ctx, p.Attachment, nil, pending(p.Attachment)); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("creating a record of a quarantined attachment: %v; want ErrQuarantined", err)
	}
	if m, err := s.MarkReleasing(ctx, marker(p.Attachment)); m != nil || !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("marking a quarantined attachment = %+v, %v; want ErrQuarantined", m, err)
	}
	hasQuarantine := func(r *record.Record) bool {
		return r != nil && len(r.Quarantined) == 1 && r.Quarantined[0].Attachment == p.Attachment && len(r.Quarantined[0].IPs) == 1
	}
	if got, _ := s.Get(ctx, holder.Attachment); !hasQuarantine(got) {
		t.Fatalf("holder after quarantine = %+v", got)
	}
	recs, _ := s.List(ctx, "net1")
	if len(recs) != 1 || !hasQuarantine(recs[0]) {
		t.Fatalf("list = %+v; want the holder alone, with its quarantine", recs)
	}
	m, err := s.MarkReleasing(ctx, marker(holder.Attachment))
	if err != nil || !hasQuarantine(m) || len(m.IPs) != 1 {
		t.Fatalf("marking the holder = %+v, %v; want its addresses and quarantine", m, err)
	}
	if _, err := s.Swap(ctx, holder.Attachment, m, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Swap(ctx, p.Attachment, nil, pending(p.Attachment)); err != nil {
		t.Fatalf("the attachment is still quarantined after its holder went: %v", err)
	}
	mustCommit(t, s, "after", "10.0.0.1/26")
}

func staleQuarantine(t *testing.T, s store.Store) {
	holder := mustCommit(t, s, "holder", "10.0.0.1/26")
	p, _, _ := commitWith(t, s, "late", "10.0.0.1/26")
	m, err := s.MarkReleasing(ctx, marker(holder.Attachment))
	if err != nil {
		t.Fatal(err)
	}
	q := record.Quarantine{Attachment: p.Attachment, IPs: []string{"10.0.0.1/26"}}
	if err := s.Quarantine(ctx, p, holder, q); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("quarantine with a holder that changed: %v; want a conflict", err)
	}
	if got, _ := s.Get(ctx, p.Attachment); got == nil || got.Revision != p.Revision {
		t.Fatalf("a refused quarantine changed the pending record: %+v", got)
	}
	if _, err := s.Swap(ctx, holder.Attachment, m, nil); err != nil {
		t.Fatal(err)
	}
}

// A releasing mark written by compare-and-swap (GC's) carries the
// quarantines tied to the record when it is written, also those tied
// after the caller read the record.
func quarantineAfterRead(t *testing.T, s store.Store) {
	holder := mustCommit(t, s, "holder", "10.0.0.1/26")
	listed, err := s.List(ctx, "net1")
	if err != nil || len(listed) != 1 {
		t.Fatalf("list = %v, %v", listed, err)
	}
	p := quarantineLate(t, s)
	marked, err := s.Swap(ctx, holder.Attachment, listed[0], store.Releasing(listed[0], listed[0].Updated))
	if errors.Is(err, store.ErrConflict) {
		return // the store saw the change: the caller judges the record again
	}
	if err != nil || len(marked.Quarantined) != 1 || marked.Quarantined[0].Attachment != p.Attachment {
		t.Fatalf("mark over the listed record = %+v, %v; want the quarantine tied since", marked, err)
	}
}

// A forget (uninstall's: release the listed record's quarantines, then
// delete it by compare-and-swap) that read the holder before an ADD was
// quarantined with it must not delete the holder as read: that would drop
// the quarantine's holder side and leave the attachment's mark, so its
// DELs would release nothing, for ever. The delete conflicts, and returns
// the holder with the quarantine, which the forget then releases.
func forgetAfterQuarantine(t *testing.T, s store.Store) {
	holder := mustCommit(t, s, "holder", "10.0.0.1/26")
	listed, err := s.List(ctx, "net1")
	if err != nil || len(listed) != 1 {
		t.Fatalf("list = %v, %v", listed, err)
	}
	p := quarantineLate(t, s)
	// The listed holder had no quarantine to release: the forget deletes it.
	forgot, err := s.Swap(ctx, holder.Attachment, listed[0], nil)
	if !errors.Is(err, store.ErrConflict) || forgot == nil || len(forgot.Quarantined) != 1 || forgot.Quarantined[0].Attachment != p.Attachment {
		t.Fatalf("forgetting the holder as listed = %+v, %v; want a conflict naming the quarantine tied since", forgot, err)
	}
	left, err := s.Unquarantine(ctx, forgot, forgot.Quarantined)
	if err != nil {
		t.Fatalf("forgetting the quarantine: %v", err)
	}
	if _, err := s.Swap(ctx, holder.Attachment, left, nil); err != nil {
		t.Fatalf("forgetting the holder as it is now: %v", err)
	}
	if _, err := s.Swap(ctx, p.Attachment, nil, pending(p.Attachment)); err != nil {
		t.Fatalf("the quarantined attachment after the forget: %v; want no mark left", err)
	}
}

// A DEL retried after its delegate failed marks again: the second mark
// must still know the record's addresses (so that forgetting drops their
// index entries), which the first DEL's marker carried.
func retriedMark(t *testing.T, s store.Store) {
	c := mustCommit(t, s, "holder", "10.0.0.1/26")
	first := marker(c.Attachment)
	first.IPs = c.IPs // a DEL's prevResult names them
	if _, err := s.MarkReleasing(ctx, first); err != nil {
		t.Fatal(err)
	}
	m, err := s.MarkReleasing(ctx, marker(c.Attachment)) // the retry, without a prevResult
	if err != nil || m == nil || len(m.IPs) != 1 || m.IPs[0] != "10.0.0.1/26" {
		t.Fatalf("second mark = %+v, %v; want it to know 10.0.0.1/26", m, err)
	}
	if _, err := s.Swap(ctx, c.Attachment, m, nil); err != nil {
		t.Fatal(err)
	}
}

// An ADD that takes over the releasing record a crashed DEL left (after
// releasing its allocation and quarantines) drops the quarantines with
// it; a second mark of that record (the DEL retried) keeps them.
func takeoverDropsQuarantines(t *testing.T, s store.Store) {
	holder := mustCommit(t, s, "holder", "10.0.0.1/26")
	p := quarantineLate(t, s)
	if _, err := s.MarkReleasing(ctx, marker(holder.Attachment)); err != nil {
		t.Fatal(err)
	}
	again, err := s.MarkReleasing(ctx, marker(holder.Attachment))
	if err != nil || len(again.Quarantined) != 1 {
		t.Fatalf("second mark = %+v, %v; want the quarantine kept", again, err)
	}
	if _, err := s.Swap(ctx, p.Attachment, nil, pending(p.Attachment)); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("after a second mark: %v; want still quarantined", err)
	}
	if _, err := s.Swap(ctx, holder.Attachment, again, pending(holder.Attachment)); err != nil {
		t.Fatalf("taking over the releasing record: %v", err)
	}
	if _, err := s.Swap(ctx, p.Attachment, nil, pending(p.Attachment)); err != nil {
		t.Fatalf("the quarantine outlived its holder's takeover: %v", err)
	}
}

// reindexOldRecords: a committed record written without index entries
// (as safe-ipam wrote them before fencing existed, with Swap) does not
// fence its address until store.Reindex gives it its entries; a second
// run changes nothing, and an address two records hold is reported.
func reindexOldRecords(t *testing.T, s store.Store) {
	old := func(cid, ip string) *record.Record {
		att := attachment(cid)
		rec := &record.Record{Attachment: att, Handle: "net1." + cid, Node: "node1", State: record.Committed, IPs: []string{ip}, Created: time.Now()}
		out, err := s.Swap(ctx, att, nil, rec)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	old("old", "10.0.0.1/26")
	old("twin-a", "10.0.0.9/26")
	old("twin-b", "10.0.0.9/26")
	n, held, err := store.Reindex(ctx, s, "net1")
	if err != nil || n != 2 || len(held) != 1 || held[0].Addr != "10.0.0.9/26" {
		t.Fatalf("Reindex: %d indexed, held %v, %v; want old and one twin, the other twin held", n, held, err)
	}
	_, _, err = commitWith(t, s, "new", "10.0.0.1/26")
	var h *store.HeldError
	if !errors.As(err, &h) || h.Holder.ContainerID != "old" {
		t.Fatalf("committing the old record's address after Reindex: %v; want it held by old", err)
	}
	if n, held, err := store.Reindex(ctx, s, "net1"); err != nil || n != 2 || len(held) != 1 {
		t.Fatalf("Reindex again: %d, %v, %v; want the same", n, held, err)
	}
}

// unquarantineMany: more quarantines than one etcd Txn may delete are
// forgotten in one call, only while the holder is unchanged; the holder
// then goes in one Swap, and each attachment may have a record again.
func unquarantineMany(t *testing.T, s store.Store) {
	const n = 140
	holder := mustCommit(t, s, "holder", "10.0.0.1/26")
	var atts []record.Attachment
	for i := range n {
		p, _, err := commitWith(t, s, fmt.Sprintf("late%03d", i), "10.0.0.1/26")
		var held *store.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("commit = %v; want held", err)
		}
		if err := s.Quarantine(ctx, p, held.Holder, record.Quarantine{Attachment: p.Attachment, IPs: []string{"10.0.0.1/26"}}); err != nil {
			t.Fatalf("quarantine %d: %v", i, err)
		}
		atts = append(atts, p.Attachment)
	}
	m, err := s.MarkReleasing(ctx, marker(holder.Attachment))
	if err != nil || len(m.Quarantined) != n {
		t.Fatalf("marking the holder = %d quarantines, %v; want %d", len(m.Quarantined), err, n)
	}
	if _, err := s.Unquarantine(ctx, holder, m.Quarantined); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("forgetting at a stale revision: %v; want ErrConflict", err)
	}
	left, err := s.Unquarantine(ctx, m, m.Quarantined[:n-1])
	if err != nil || len(left.Quarantined) != 1 || left.Quarantined[0].Attachment != atts[n-1] {
		t.Fatalf("forgetting %d = %+v, %v; want the last one left", n-1, left, err)
	}
	if got, _ := s.Get(ctx, holder.Attachment); got == nil || len(got.Quarantined) != 1 || got.Revision != left.Revision {
		t.Fatalf("holder after forgetting = %+v; want one quarantine at revision %d", got, left.Revision)
	}
	if _, err := s.Swap(ctx, atts[0], nil, pending(atts[0])); err != nil {
		t.Fatalf("a forgotten quarantine's attachment: %v", err)
	}
	if _, err := s.Swap(ctx, atts[n-1], nil, pending(atts[n-1])); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("the one left: %v; want ErrQuarantined", err)
	}
	if _, err := s.Swap(ctx, holder.Attachment, left, nil); err != nil {
		t.Fatalf("deleting the holder: %v", err)
	}
	if _, err := s.Swap(ctx, atts[n-1], nil, pending(atts[n-1])); err != nil {
		t.Fatalf("after the holder went: %v", err)
	}
}

// commitShared commits cid with ips under handle, naming with as the
// record it shares its addresses with.
func commitShared(t *testing.T, s store.Store, cid string, with *record.Record, handle string, ips ...string) (*record.Record, error) {
	t.Helper()
	_, out, err := commitEdited(t, s, cid, func(c *record.Record) {
		c.IPs, c.Handle = ips, handle
		if with != nil {
			c.SharedWith = &record.Peer{Attachment: with.Attachment, Node: with.Node}
		}
	})
	return out, err
}

func sharedHandle(t *testing.T, s store.Store) {
	const vm = "net1.vmi.default.vm1"
	source, err := commitShared(t, s, "source", nil, vm, "10.0.0.1/26")
	if err != nil {
		t.Fatal(err)
	}
	var held *store.HeldError
	// Sharing must be named, under the same VM handle: another VM's pod,
	// an ordinary pod, or one that does not name the holder is fenced.
	for cid, c := range map[string]struct {
		with   *record.Record
		handle string
	}{
		"unnamed":  {nil, vm},
		"other-vm": {source, "net1.vmi.default.vm2"},
		"ordinary": {source, "net1.ordinary"},
	} {
		if _, err := commitShared(t, s, cid, c.with, c.handle, "10.0.0.1/26"); !errors.As(err, &held) || held.Holder.Attachment != source.Attachment {
			t.Fatalf("%s: commit = %v; want held by the source", cid, err)
		}
	}
	target, err := commitShared(t, s, "target", source, vm, "10.0.0.1/26")
	if err != nil {
		t.Fatalf("the migration target's commit: %v", err)
	}
	// The target holds the entry now: forgetting the source leaves it.
	m, err := s.MarkReleasing(ctx, marker(source.Attachment))
	if err != nil || m == nil || m.Handle != vm {
		t.Fatalf("mark source = %+v, %v", m, err)
	}
	if _, err := s.Swap(ctx, source.Attachment, m, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := commitWith(t, s, "after-source", "10.0.0.1/26"); !errors.As(err, &held) || held.Holder.Attachment != target.Attachment {
		t.Fatalf("after the source went: commit = %v; want held by the target", err)
	}
	// A mark keeps whom the record shares with, so its DEL can hand the
	// entries back.
	m, err = s.MarkReleasing(ctx, marker(target.Attachment))
	if err != nil || !m.SharedWith.Is(source) || m.Handle != vm {
		t.Fatalf("mark target = %+v, %v; want it to share with the source", m, err)
	}
}
