package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Nodes share the store when it is Calico's etcd; one node's GC must not
// release another node's attachments, which its runtime cannot list. (A
// file store is node-local.)
func TestGCLeavesOtherNodesAlone(t *testing.T) {
	func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		r.add("on-node1")
		r.node = "node2"
		r.add("on-node2")
		if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
			t.Fatal(err)
		}
		node2 := r.record("on-node2")
		r.node = "node1"
		if node1 := r.record("on-node1"); node1 == nil || node2 != nil {
			t.Fatalf("node2's GC: node1's record %v, node2's %v; want node1's kept, node2's collected", node1, node2)
		}
		if held := r.held(); len(held["net1.on-node1"]) != 1 {
			t.Errorf("node2's GC released node1's address: %v", held)
		}
	}(t, newRig(t, "etcd"))
}

// lostAnswer applies a commit and then reports the store unavailable, as
// when etcd's answer is lost in a partition or a timeout.
type lostAnswer struct{ store.Store }

func (s lostAnswer) Commit(ctx context.Context, pending, committed *record.Record) (*record.Record, error) {
	if _, err := s.Store.Commit(ctx, pending, committed); err != nil {
		return nil, err
	}
	return nil, store.ErrUnavailable
}

// An ADD that cannot tell whether its commit happened must not release:
// if it did happen, the record would hold addresses Calico has freed.
func TestAddWithUnknownCommitOutcomeKeepsAddresses(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		g := r.guardOver(lostAnswer{r.store()}, r.conf())
		_, err := g.Add(context.Background(), env("c1"))
		var cniErr *types.Error
		if !errors.As(err, &cniErr) || cniErr.Code != types.ErrTryAgainLater {
			t.Fatalf("ADD = %v; want code 11", err)
		}
		if n := len(r.calls("DEL")); n != 0 {
			t.Fatalf("the delegate was asked to release %d times although the commit may have happened", n)
		}
		rec := r.record("c1")
		if rec == nil || rec.State != record.Committed {
			t.Fatalf("record %+v", rec)
		}
		replayed := r.add("c1") // the runtime's retry
		ips, _ := resultIPs(replayed)
		if held := r.held()["net1.c1"]; len(held) != 1 || held[0] != ips[0] {
			t.Errorf("retry got %v; the delegate holds %v", ips, held)
		}
	})
}

// A pending record whose process still runs is an ADD in flight: another
// ADD must not "recover" it by releasing what that ADD is allocating, and
// GC must not collect it, however old.
func TestRecordOfLiveProcessIsLeftAlone(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		att := record.Attachment{Network: "net1", ContainerID: "c1", IfName: "eth0"}
		inFlight := &record.Record{Attachment: att, Node: "node1", Handle: "net1.c1", State: record.Pending,
			Created: time.Now().Add(-time.Hour), Owner: record.Self()}
		if _, err := r.store().Swap(context.Background(), att, nil, inFlight); err != nil {
			t.Fatal(err)
		}
		_, err := r.run("ADD", env("c1"), r.conf())
		if cniCode(err) != types.ErrTryAgainLater {
			t.Fatalf("ADD over an ADD in flight: %v; want code 11", err)
		}
		if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
			t.Fatal(err)
		}
		if calls := r.calls("DEL"); len(calls) != 0 {
			t.Errorf("the in-flight ADD's attachment was released %d times", len(calls))
		}
		if rec := r.record("c1"); rec == nil || rec.State != record.Pending {
			t.Errorf("record %+v; want the in-flight ADD's pending record", rec)
		}
	})
}

// delMarksFirst lets a DEL mark the record between GC's listing and GC's
// own mark, as when the runtime's DEL and GC run at once.
type delMarksFirst struct {
	store.Store
	done bool
}

func (s *delMarksFirst) Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	if !s.done && next != nil && next.State == record.Releasing {
		s.done = true
		now := time.Now()
		if _, err := s.Store.MarkReleasing(ctx, &record.Record{Attachment: att, Node: "node1", Created: now, Updated: now}); err != nil {
			return nil, err
		}
	}
	return s.Store.Swap(ctx, att, prev, next)
}

// A GC that succeeds has released every attachment not listed as valid,
// even one a concurrent (and failing) DEL marked under its feet.
func TestGCReleasesWhatAConcurrentDelMarked(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		r.add("gone")
		g := r.guardOver(&delMarksFirst{Store: r.store()}, gcConf(t, r.conf()))
		if err := g.GC(context.Background(), delegate.Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
			t.Fatal(err)
		}
		if rec, held := r.record("gone"), r.held(); rec != nil || len(held) != 0 {
			t.Fatalf("GC succeeded but left record %+v, delegate %v", rec, held)
		}
	})
}

// delDuringAdd runs a whole DEL of the attachment (mark and forget) just
// before the ADD commits, as a runtime racing its own ADD would.
type delDuringAdd struct{ store.Store }

func (s delDuringAdd) Commit(ctx context.Context, pending, committed *record.Record) (*record.Record, error) {
	att := committed.Attachment
	now := time.Now()
	marked, err := s.Store.MarkReleasing(ctx, &record.Record{Attachment: att, Node: "node1", Created: now, Updated: now})
	if err != nil {
		return nil, err
	}
	if _, err := s.Store.Swap(ctx, att, marked, nil); err != nil {
		return nil, err
	}
	return s.Store.Commit(ctx, pending, committed)
}

// If the ADD then cannot release what its delegate allocated, a record
// must still claim the attachment, or nothing would ever release it.
func TestAddLosingToDelLeavesAClaim(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		g := r.guardOver(delDuringAdd{r.store()}, r.conf())
		t.Setenv(fakeFailEnv, "DEL")
		if _, err := g.Add(context.Background(), env("c1")); err == nil {
			t.Fatal("ADD succeeded although a DEL removed its record")
		}
		if rec := r.record("c1"); rec == nil || rec.Owner != nil {
			t.Fatalf("claim %+v; want an ownerless record while the delegate holds %v", rec, r.held())
		}
		t.Setenv(fakeFailEnv, "")
		r.del("c1")
		if rec, held := r.record("c1"), r.held(); rec != nil || len(held) != 0 {
			t.Fatalf("after DEL: record %+v, delegate %v", rec, held)
		}
	})
}

// A DEL must not fail forever on a prevResult it cannot convert.
func TestDelWithUnreadablePrevResult(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.add("c1")
		var m map[string]any
		_ = json.Unmarshal(r.conf(), &m)
		m["prevResult"] = map[string]any{"cniVersion": "1.0.0", "ips": "not a list"}
		conf, _ := json.Marshal(m)
		if _, err := r.run("DEL", env("c1"), conf); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		if rec, held := r.record("c1"), r.held(); rec != nil || len(held) != 0 {
			t.Fatalf("after DEL: record %+v, delegate %v", rec, held)
		}
	})
}

// raceAtClaim runs a DEL and a new ADD of the attachment just before the
// failed ADD leaves its claim, with the fake delegate healthy meanwhile.
type raceAtClaim struct {
	store.Store
	r    *rig
	cid  string
	done bool
}

func (s *raceAtClaim) Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	if !s.done && prev != nil && next != nil && next.State == record.Pending && next.Owner == nil {
		s.done = true
		failing := os.Getenv(fakeFailEnv)
		os.Setenv(fakeFailEnv, "")
		s.r.del(s.cid)
		s.r.add(s.cid)
		os.Setenv(fakeFailEnv, failing)
	}
	return s.Store.Swap(ctx, att, prev, next)
}

// ADD#1's delegate ADD fails and so does its release; meanwhile a DEL and
// a new ADD of the same attachment complete. ADD#1's claim for what its
// delegate may hold must not replace ADD#2's committed record: that record
// claims the same container handle, and replacing it left the running pod
// unfenced and its CHECK failing (issue 19, item 8).
func TestFailedAddNeverOverwritesALaterCommit(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		t.Setenv(fakeFailEnv, "ADD,DEL")
		g := r.guardOver(&raceAtClaim{Store: r.store(), r: r, cid: "c1"}, r.conf())
		if _, err := g.Add(context.Background(), env("c1")); err == nil {
			t.Fatal("ADD#1 succeeded with a failing delegate")
		}
		rec := r.record("c1")
		if rec == nil || rec.State != record.Committed || len(rec.IPs) != 1 {
			t.Fatalf("record after ADD#1 failed: %+v; want ADD#2's committed record", rec)
		}
		os.Setenv(fakeFailEnv, "")
		if held := r.held(); len(held["net1.c1"]) != 1 || held["net1.c1"][0] != rec.IPs[0] {
			t.Errorf("delegate holds %v, record %v", held, rec.IPs)
		}
	})
}

// Two machines under one Calico node name (a stale nodename) share the
// node's records in etcd: one machine's GC must not release the other's,
// which its runtime cannot list. ADD writes its host into the record.
func TestGCLeavesAnotherHostsRecordsAlone(t *testing.T) {
	func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		for _, cid := range []string{"live", "gone", "theirs"} {
			r.add(cid)
		}
		mine := r.record("theirs")
		if mine.Host != record.ThisHost() {
			t.Fatalf("ADD wrote host %q, want %q", mine.Host, record.ThisHost())
		}
		theirs := *mine
		theirs.Host = "other-machine"
		if _, err := r.store().Swap(context.Background(), mine.Attachment, mine, &theirs); err != nil {
			t.Fatal(err)
		}
		if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf(), "live")); err != nil {
			t.Fatal(err)
		}
		if r.record("theirs") == nil || r.record("gone") != nil {
			t.Fatalf("GC: another host's record %v, this host's gone one %v; want the first kept, the second collected", r.record("theirs"), r.record("gone"))
		}
		if held := r.held(); len(held["net1.theirs"]) != 1 {
			t.Errorf("GC released another host's address: %v", held)
		}
	}(t, newRig(t, "etcd"))
}
