package runtime

import (
	"fmt"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd/calls"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// Scenario 3: containerd restarts (in the same namespaces, as on a node)
// while pods run. Nothing is released early: the pods keep their
// addresses in PodSandboxStatus and in Calico's data, and no DEL is sent.
// Then they are stopped and removed, and nothing is left.
func TestRuntimeRestartWithLivePods(t *testing.T) {
	for _, safe := range []bool{false, true} {
		t.Run(label(safe), func(t *testing.T) {
			ctx := testContext(t)
			n := newNode(t, nodeOptions{safe: safe, gen: testbed.Modern})
			ids := map[string]string{}
			for i := range 2 {
				id := n.run(ctx, containerd.Pod{Namespace: "default", Name: fmt.Sprintf("web-%d", i), UID: podUID("web", i)})
				ids[id] = n.ip(ctx, id).String()
			}
			if err := n.cd.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			snap, err := n.cluster.Calico(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for id, was := range ids {
				if now := n.ip(ctx, id).String(); now != was {
					t.Errorf("sandbox %s reported %s before the restart and %s after", containerd.Short(id), was, now)
				}
				if a, held := snap.Lookup(n.ip(ctx, id)); !held || a.Handle != networkName+"."+id {
					t.Errorf("after the restart Calico has %s of running sandbox %s: held=%v handle=%q", was, containerd.Short(id), held, a.Handle)
				}
				for _, c := range calls.Of(n.calls(), id) {
					if c.Command != "ADD" {
						t.Errorf("the restart sent %s for running sandbox %s", c.Command, containerd.Short(id))
					}
				}
			}
			if safe {
				recs, err := n.cluster.Records(ctx, networkName, n.net.Safe.Store)
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != len(ids) {
					t.Errorf("after the restart safe-ipam holds %d records, want %d", len(recs), len(ids))
				}
			}
			n.removeAll(ctx)
			if left := n.leftovers(ctx); len(left) > 0 {
				t.Errorf("after every pod was removed, still held: %v", left)
			}
		})
	}
}
