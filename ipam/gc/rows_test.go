package gc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook/rulebooktest"
)

// Issue 41, item 1: the rulebook's rows, through safe-ipam gc (a liveness
// source, which lags) over each store: a record goes exactly when the
// rulebook says so.
func TestGCCommandAnswersTheRulebooksRows(t *testing.T) {
	for _, kind := range []string{"file", "etcd"} {
		t.Run(kind, func(t *testing.T) {
			n := newNode(t)
			if kind == "etcd" {
				n = newEtcdNode(t)
			}
			st := n.store(t)
			want := map[string]bool{}
			live := []liveness.Running{{ContainerID: "other", IfName: "eth0"}}
			for i, row := range rulebooktest.Rows {
				if !row.For(true, kind == "etcd") {
					continue
				}
				cid := fmt.Sprintf("row%d", i)
				rec := row.Record("node1", cid, i, time.Now())
				rec.Network, rec.Handle = "k8s-pod-network", "k8s-pod-network."+cid
				if _, err := st.Swap(context.Background(), rec.Attachment, nil, rec); err != nil {
					t.Fatal(err)
				}
				if row.Listed {
					live = append(live, liveness.Running{ContainerID: cid, IfName: "eth0"})
				}
				want[cid+"/eth0"] = row.Release
			}
			if code, out, errOut := n.run(t, "--live", n.live(t, live), "--apply"); code != admin.ExitOK {
				t.Fatalf("gc: exit %d\n%s%s", code, out, errOut)
			}
			left := map[string]bool{}
			for _, name := range n.left(t) {
				left[name] = true
			}
			for i, row := range rulebooktest.Rows {
				name := fmt.Sprintf("row%d/eth0", i)
				if release, ok := want[name]; ok && left[name] == release {
					t.Errorf("%s: released %v, the rulebook says %v", row.Name, !left[name], release)
				}
			}
		})
	}
}
