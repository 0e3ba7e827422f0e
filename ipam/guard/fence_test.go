package guard_test

import (
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/safe-ipam/safe-ipam/ipam/guard"
)

// freeBehindBack releases handle in the fake delegate without safe-ipam,
// as a late DEL by pod name from a node without it, or calicoctl ipam
// release, would, and rewinds the allocator so the next ADD is handed the
// freed address, as Calico's free list eventually does.
func (r *rig) freeBehindBack(handle string) {
	r.t.Helper()
	err := withState(r.fakeDir, func(st *fakeState) error {
		delete(st.Handles, handle)
		st.Next--
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

// Issue 14: an address freed behind a running attachment's back is never
// handed to another; it stays allocated, quarantined with its holder.
func TestFencingQuarantinesAHeldAddress(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		ips, _ := resultIPs(r.add("holder"))
		r.freeBehindBack("net1.holder")

		_, err := r.run("ADD", env("late"), r.conf())
		if cniCode(err) != types.ErrTryAgainLater {
			t.Fatalf("ADD given the holder's address = %v; want code 11", err)
		}
		if rec := r.record("late"); rec != nil {
			t.Fatalf("the fenced attachment has a record: %+v", rec)
		}
		if held := r.held()["net1.late"]; !slices.Equal(held, ips) {
			t.Fatalf("quarantine %v; want %v kept allocated", held, ips)
		}
		holder := r.record("holder")
		if holder == nil || len(holder.Quarantined) != 1 || holder.Quarantined[0].ContainerID != "late" {
			t.Fatalf("holder %+v; want the quarantine tied to it", holder)
		}

		// The runtime's cleanup DEL and a retry in the same sandbox keep it.
		r.del("late")
		adds := len(r.calls("ADD"))
		if _, err := r.run("ADD", env("late"), r.conf()); cniCode(err) != types.ErrTryAgainLater || len(r.calls("ADD")) != adds {
			t.Fatalf("ADD of the quarantined attachment = %v, %d delegate ADDs; want 11 without one", err, len(r.calls("ADD"))-adds)
		}
		if held := r.held()["net1.late"]; !slices.Equal(held, ips) {
			t.Fatalf("DEL of the quarantined attachment released %v", ips)
		}

		// A new sandbox gets an address of its own.
		if got, _ := resultIPs(r.add("late-2")); slices.Equal(got, ips) {
			t.Fatalf("a new sandbox was handed %v", got)
		}

		// The holder's DEL releases the quarantine with it.
		r.del("holder")
		if held := r.held(); len(held["net1.late"]) != 0 || r.record("holder") != nil {
			t.Fatalf("after the holder's DEL: delegate %v, record %+v", held, r.record("holder"))
		}
		r.add("late") // no longer quarantined
	})
}

// GC of the holder releases its quarantines too.
func TestGCReleasesQuarantinesWithTheHolder(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		r.add("holder")
		r.freeBehindBack("net1.holder")
		if _, err := r.run("ADD", env("late"), r.conf()); cniCode(err) != types.ErrTryAgainLater {
			t.Fatalf("ADD = %v; want 11", err)
		}
		if _, err := r.run("GC", guard.Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
			t.Fatal(err)
		}
		if held := r.held(); len(held) != 0 || r.record("holder") != nil {
			t.Fatalf("after GC: delegate %v, record %+v", held, r.record("holder"))
		}
		r.add("late") // no longer quarantined
	})
}
