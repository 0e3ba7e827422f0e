package guard_test

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/store"
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
		// Issue 44, item 1: a fence is safe-ipam at work, not the node
		// failing: no failure note, readiness stays.
		if guard.NodeFailing(err) {
			t.Errorf("the fenced ADD's error %v counts as the node failing", err)
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
		if _, err := r.run("ADD", env("late"), r.conf()); cniCode(err) != types.ErrTryAgainLater || len(r.calls("ADD")) != adds || guard.NodeFailing(err) {
			t.Fatalf("ADD of the quarantined attachment = %v, %d delegate ADDs; want 11 without one, not the node failing", err, len(r.calls("ADD"))-adds)
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
		if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
			t.Fatal(err)
		}
		if held := r.held(); len(held) != 0 || r.record("holder") != nil {
			t.Fatalf("after GC: delegate %v, record %+v", held, r.record("holder"))
		}
		r.add("late") // no longer quarantined
	})
}

// Issue 19, item 4: a record of a node that is gone (Calico's etcd
// answers and has no Node of that name: kube-controllers deleted it and
// freed the node's addresses) does not fence. The ADD given its address
// releases it, with its quarantines, and proceeds. Any doubt fences, and
// so does a node found gone once (issue 41, item 2.8): as for the sweep,
// one rule, two sightings a grace apart, the grace on etcd's clock.
func TestFencingSettlesAHolderOnADeadNode(t *testing.T) {
	tests := []struct {
		name       string
		holderNode bool          // Calico still has the holder's Node
		noted      time.Duration // a sweep noted the node gone with this grace; -1: no sweep
		calicoEtcd string        // "" is the shared etcd
		settles    map[string]bool
	}{
		{name: "the holder's node is gone, a sweep found it gone a grace ago", settles: map[string]bool{"etcd": true}},
		{name: "the holder's node is gone, found so once only", noted: -1},
		{name: "the holder's node is gone, within the grace a sweep noted", noted: time.Hour},
		{name: "the holder's node is known", holderNode: true},
		{name: "Calico's etcd does not answer", calicoEtcd: "http://127.0.0.1:9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, r *rig) {
				etcd := sharedEtcd.get(t)
				r.calicoEtcd = cmp.Or(tt.calicoEtcd, etcd.Endpoint())
				dead, alive := "gone"+r.prefix[1:], "here"+r.prefix[1:]
				if tt.holderNode {
					if _, err := etcd.Client().Put(context.Background(), calico.NodeKey(dead), `{"kind":"Node"}`); err != nil {
						t.Fatal(err)
					}
				}
				r.node = dead
				ips, _ := resultIPs(r.add("holder"))
				r.freeBehindBack("net1.holder") // kube-controllers frees the dead node's addresses
				if cluster, ok := r.store().(store.Cluster); ok && tt.noted >= 0 {
					if err := cluster.NoteGone(context.Background(), "net1", dead, tt.noted); err != nil {
						t.Fatal(err)
					}
				}

				r.node = alive
				res, err := r.run("ADD", env("new"), r.conf())
				if !tt.settles[r.kind] {
					if cniCode(err) != types.ErrTryAgainLater {
						t.Fatalf("ADD given the address of a holder that may live = %v; want fenced, code 11", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("ADD given the address of a dead node's record = %v; want it to succeed", err)
				}
				if got, _ := resultIPs(res); !slices.Equal(got, ips) {
					t.Fatalf("ADD got %v; want the freed %v", got, ips)
				}
				r.node = dead
				if rec := r.record("holder"); rec != nil {
					t.Fatalf("the dead node's record stayed: %+v", rec)
				}
				r.node = alive
				if rec := r.record("new"); rec == nil || !slices.Equal(rec.IPs, ips) {
					t.Fatalf("record of the new attachment %+v; want it to hold %v", rec, ips)
				}
			})
		})
	}
}
