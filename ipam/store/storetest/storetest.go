// Package storetest is the contract every store.Store must meet, run by
// each store's own tests.
package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Run checks s against the store contract.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	runChecks(t, open, []check[store.Store]{
		{"create, commit and delete", createCommitDelete},
		{"conflicts return the stored record", conflicts},
		{"no ABA after delete and recreate", noABA},
		{"one winner among concurrent creators", oneWinner},
		{"list is per network", listPerNetwork},
		{"invalid names are refused", invalidNames},
	})
}

var ctx = context.Background()

// check is one clause of a contract, run on a store of its own.
type check[S any] struct {
	name string
	fn   func(t *testing.T, s S)
}

func runChecks[S any](t *testing.T, open func(t *testing.T) S, checks []check[S]) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

func attachment(cid string) record.Attachment {
	return record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"}
}

func pending(att record.Attachment) *record.Record {
	return &record.Record{Attachment: att, Handle: "net1." + att.ContainerID, State: record.Pending, Created: time.Now()}
}

func createCommitDelete(t *testing.T, s store.Store) {
	att := attachment("c1")
	p, err := s.Swap(ctx, att, nil, pending(att))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	committed := *p
	committed.State, committed.IPs = record.Committed, []string{"10.0.0.1/26"}
	c, err := s.Swap(ctx, att, p, &committed)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	got, err := s.Get(ctx, att)
	if err != nil || got == nil || got.State != record.Committed || got.IPs[0] != "10.0.0.1/26" || got.Revision != c.Revision {
		t.Fatalf("get after commit = %+v, %v; want committed at revision %d", got, err, c.Revision)
	}
	if _, err := s.Swap(ctx, att, c, nil); err != nil {
		t.Fatalf("delete by swap: %v", err)
	}
	if got, _ := s.Get(ctx, att); got != nil {
		t.Fatalf("record left after delete: %+v", got)
	}
	if m, err := s.MarkReleasing(ctx, marker(att)); m != nil || err != nil {
		t.Fatalf("marking no record = %+v, %v; want nothing", m, err)
	}
	if got, _ := s.Get(ctx, att); got != nil {
		t.Fatalf("marking no record created %+v", got)
	}
}

func conflicts(t *testing.T, s store.Store) {
	att := attachment("c2")
	p, err := s.Swap(ctx, att, nil, pending(att))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := s.Swap(ctx, att, nil, pending(att))
	if !errors.Is(err, store.ErrConflict) || cur == nil || cur.Revision != p.Revision {
		t.Fatalf("second create = %+v, %v; want conflict with the first", cur, err)
	}
	next := *p
	next.State = record.Committed
	c, err := s.Swap(ctx, att, p, &next)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := s.Swap(ctx, att, p, nil); !errors.Is(err, store.ErrConflict) || cur.Revision != c.Revision {
		t.Fatalf("stale delete = %+v, %v; want conflict", cur, err)
	}
	m, err := s.MarkReleasing(ctx, marker(att))
	if err != nil || m == nil || m.State != record.Releasing || m.Revision == c.Revision {
		t.Fatalf("mark = %+v, %v; want a new releasing revision", m, err)
	}
	if got, _ := s.Get(ctx, att); got == nil || got.State != record.Releasing || got.Revision != m.Revision || got.Node != "node1" {
		t.Fatalf("stored after mark = %+v", got)
	}
	if cur, err := s.Swap(ctx, att, c, &next); !errors.Is(err, store.ErrConflict) || cur.Revision != m.Revision {
		t.Fatalf("swap over a marked record = %+v, %v; want conflict", cur, err)
	}
	if _, err := s.Swap(ctx, att, m, nil); err != nil {
		t.Fatal(err)
	}
	if cur, err := s.Swap(ctx, att, c, &next); !errors.Is(err, store.ErrConflict) || cur != nil {
		t.Fatalf("swap of a deleted record = %+v, %v; want conflict with nothing", cur, err)
	}
}

func noABA(t *testing.T, s store.Store) {
	att := attachment("c3")
	first, err := s.Swap(ctx, att, nil, pending(att))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Swap(ctx, att, first, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Swap(ctx, att, nil, pending(att)); err != nil {
		t.Fatal(err)
	}
	commit := *first
	commit.State = record.Committed
	if _, err := s.Swap(ctx, att, first, &commit); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit over a recreated record: %v; want conflict", err)
	}
}

func oneWinner(t *testing.T, s store.Store) {
	att := attachment("c4")
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Swap(ctx, att, nil, pending(att))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	wins := 0
	for err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d creators won, want 1", wins)
	}
}

func listPerNetwork(t *testing.T, s store.Store) {
	for _, att := range []record.Attachment{attachment("a"), attachment("b"), {Network: "net2", ContainerID: "a", IfName: "eth0"}} {
		p := pending(att)
		if _, err := s.Swap(ctx, att, nil, p); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.List(ctx, "net1")
	if err != nil || len(recs) != 2 {
		t.Fatalf("list net1 = %d records, %v; want 2", len(recs), err)
	}
	for _, r := range recs {
		if r.Network != "net1" || r.Revision == 0 {
			t.Errorf("listed record %+v", r)
		}
	}
	if recs, err := s.List(ctx, "empty"); err != nil || len(recs) != 0 {
		t.Fatalf("list of an unknown network = %v, %v", recs, err)
	}
}

func invalidNames(t *testing.T, s store.Store) {
	for _, att := range []record.Attachment{
		{Network: "net1", ContainerID: "../x", IfName: "eth0"},
		{Network: "net1", ContainerID: "c", IfName: "a/b"},
		{Network: "net1", ContainerID: "c", IfName: ".."},
		{Network: "../net", ContainerID: "c", IfName: "eth0"},
	} {
		if _, err := s.Swap(ctx, att, nil, pending(att)); err == nil || errors.Is(err, store.ErrConflict) {
			t.Errorf("swap of %v: %v; want a validation error", att, err)
		}
		if _, err := s.MarkReleasing(ctx, marker(att)); err == nil {
			t.Errorf("mark of %v succeeded", att)
		}
	}
	if _, err := s.List(ctx, "a/b"); err == nil {
		t.Errorf("list of network a/b succeeded")
	}
}

func marker(att record.Attachment) *record.Record {
	now := time.Now()
	return &record.Record{Attachment: att, Node: "node1", Handle: "net1." + att.ContainerID, Created: now, Updated: now}
}
