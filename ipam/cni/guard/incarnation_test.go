package guard_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 31, finding 1: an adopted record of default/web-0 (pod-name handle
// default.web-0, address X) whose pod is gone; web-0 runs again elsewhere
// and Calico handed it X again under the same handle. A release by pod
// name would free the running pod's X. Calico's data tells the two apart
// only by the allocation's owner attributes, never by the address: what
// safe-ipam does on its own judgment (dead-node collection, GC) releases
// the pod-name handle only when they name the record's pod on the
// record's node, and a dead node's never (kube-controllers freed its
// allocations); a runtime DEL also refuses when they name another node.
func TestAPodNameHandleIsReleasedOnlyForTheRecordedIncarnation(t *testing.T) {
	const handle, addr = "default.web-0", "10.0.0.77/24"
	x := netip.MustParseAddr("10.0.0.77")
	owner := func(node string) map[string]string {
		return map[string]string{"namespace": "default", "pod": "web-0", "node": node, "timestamp": "2026-11-26 07:00:00 +0000 UTC"}
	}
	tests := []struct {
		name     string
		via      string // "dead-node", "gc" or "del"
		owner    map[string]string
		released bool
	}{
		{"dead node: the new incarnation on another node holds X", "dead-node", owner("node2"), false},
		{"dead node: even with the record's own owner attributes", "dead-node", owner("dead"), false},
		{"gc: the new incarnation on another node holds X", "gc", owner("node2"), false},
		{"gc: Calico 2.x, no owner attributes", "gc", nil, false},
		{"gc: another pod's allocation", "gc", map[string]string{"namespace": "default", "pod": "web-1", "node": "node1"}, false},
		{"gc: the recorded pod on the recorded node", "gc", owner("node1"), true},
		{"del: the new incarnation on another node holds X", "del", owner("node2"), false},
		{"del: Calico 2.x, no owner attributes: the address decides", "del", nil, true},
		{"del: the recorded pod on the recorded node", "del", owner("node1"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "etcd")
			recNode := "node1"
			if tt.via == "dead-node" {
				recNode = "dead"
			}
			r.calico = &fakeCalico{nodes: map[string]bool{"node1": true, "node2": true}, held: map[netip.Addr]guard.Allocation{x: {Handle: handle, Owner: tt.owner}}}
			r.seedHandle(handle, addr)
			cluster := r.store().(store.Cluster)
			st := cluster.ForNode(recNode)
			att := record.Attachment{Network: "net1", ContainerID: "adopted", IfName: "eth0"}
			rec := &record.Record{Attachment: att, PodNamespace: "default", PodName: "web-0", Node: recNode, Handle: handle,
				State: record.Committed, IPs: []string{addr}, Created: time.Now().Add(-time.Hour), Updated: time.Now().Add(-time.Hour)}
			ctx := context.Background()
			committed, err := st.Commit(ctx, nil, rec)
			if err != nil {
				t.Fatal(err)
			}
			g := r.guardOver(r.store(), r.conf())
			switch tt.via {
			case "dead-node":
				other := g.ForNode(recNode, st)
				err = other.Collect(ctx, committed, binDir, other.DeadNodeWitness(&rulebook.Death{Noted: true, Passed: true}))
			case "gc":
				err = g.Collect(ctx, committed, binDir, g.Witness(&rulebook.Listing{Source: "a listing of nothing else", Node: recNode, Entries: 1}, false))
			case "del":
				e := env("adopted")
				err = g.Del(ctx, delegate.Env{ContainerID: e.ContainerID, IfName: e.IfName, NetNS: e.NetNS, Path: e.Path, Args: e.Args})
			}
			if err != nil {
				t.Fatalf("%s: %v", tt.via, err)
			}
			if held := slices.Contains(r.held()[handle], addr); held == tt.released {
				t.Fatalf("%s of the adopted record: %s held by %s: %v; want released %v", tt.via, addr, handle, held, tt.released)
			}
			if got, _ := st.Get(ctx, att); got != nil {
				t.Fatalf("the record stayed: %+v", got)
			}
		})
	}
}
