package gc_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook/rulebooktest"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
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

// Issue 41, item 2.4: the remedy for a stale Calico nodename (fix the
// nodename) and any rename while pods run leave this machine's records
// under the old name in the etcd store, where its DELs no longer look.
// gc --former-node OLD judges them by this machine's runtime: the ones
// whose sandbox is gone are released; the ones still running are kept
// (a later run releases them once their pod is gone); another machine's
// records under OLD, and those without a host, are kept.
func TestGCFormerNodeReleasesThisMachinesRecordsUnderTheOldName(t *testing.T) {
	n := newEtcdNode(t)
	old := etcdstore.NewWithClient(n.etcd.Client(), config.DefaultEtcdPrefix, "node-old", 5*time.Second)
	at := time.Now().Add(-time.Hour)
	for _, w := range []struct{ cid, host string }{{"gone", record.ThisHost()}, {"running", record.ThisHost()}, {"theirs", "other-machine"}, {"hostless", ""}} {
		rec := &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: w.cid, IfName: "eth0"}, Node: "node-old", Host: w.host,
			Handle: "k8s-pod-network." + w.cid, State: record.Committed, IPs: []string{"10.244.0.1/26"}, Created: at, Updated: at}
		if _, err := old.Swap(context.Background(), rec.Attachment, nil, rec); err != nil {
			t.Fatal(err)
		}
	}
	n.record(t, "mine", "eth0", time.Hour) // under node1, this machine's name now
	live := n.live(t, []liveness.Running{{ContainerID: "running", IfName: "eth0"}, {ContainerID: "mine", IfName: "eth0"}})
	code, out, errOut := n.run(t, "--live", live, "--former-node", "node-old", "--apply")
	if code != admin.ExitOK {
		t.Fatalf("gc --former-node: exit %d\n%s%s", code, out, errOut)
	}
	recs, err := old.List(context.Background(), "k8s-pod-network")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range recs {
		left = append(left, r.ContainerID)
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"hostless", "running", "theirs"}) {
		t.Errorf("records under node-old after gc --former-node: %v; want this machine's gone record released alone\n%s", left, out)
	}
	if got := n.left(t); !slices.Equal(got, []string{"mine/eth0"}) {
		t.Errorf("records under node1: %v", got)
	}
	if got := n.calls(t); !slices.Equal(got, []string{"DEL gone"}) {
		t.Errorf("delegate calls %q; want the DEL of gone alone", got)
	}
	if code, _, errOut := n.run(t, "--former-node", "node-old"); code != admin.ExitError || !strings.Contains(errOut, "need a liveness source") {
		t.Errorf("--former-node without a source: exit %d\n%s", code, errOut)
	}
	file := newNode(t)
	if code, out, errOut := file.run(t, "--live", live, "--former-node", "node-old"); code != admin.ExitError || !strings.Contains(out+errOut, "needs the etcd store") {
		t.Errorf("--former-node over a file store: exit %d\n%s%s", code, out, errOut)
	}
}

// Review of issue 41: in the etcd store, after this machine's host name
// changed (hostnamectl, cloud-init, DHCP), its older records carry the
// old name, and every collection kept them as another host's (a stale
// nodename?), for ever. gc --former-host OLD judges the records OLD wrote
// as this machine's; without it they are kept, with the warning naming
// the remedy.
func TestGCFormerHostJudgesThisMachinesRecordsUnderItsOldHostName(t *testing.T) {
	n := newEtcdNode(t)
	n.recordBy(t, "this-machine-before-rename", "gone", "eth0", time.Hour)
	n.recordBy(t, "another-machine", "theirs", "eth0", time.Hour)
	n.record(t, "live", "eth0", time.Hour)
	live := n.live(t, []liveness.Running{{ContainerID: "live", IfName: "eth0"}})
	if code, out, errOut := n.run(t, "--live", live, "--apply"); code != admin.ExitOK || !strings.Contains(out+errOut, "--former-host") {
		t.Fatalf("gc: exit %d; want the warning to name --former-host\n%s%s", code, out, errOut)
	}
	if got := n.left(t); len(got) != 3 {
		t.Fatalf("records after gc without --former-host: %v; want every one kept", got)
	}
	code, out, errOut := n.run(t, "--live", live, "--former-host", "this-machine-before-rename", "--apply")
	if code != admin.ExitOK {
		t.Fatalf("gc --former-host: exit %d\n%s%s", code, out, errOut)
	}
	if got := n.left(t); !slices.Equal(got, []string{"live/eth0", "theirs/eth0"}) {
		t.Errorf("records after gc --former-host: %v; want the gone sandbox's released, another machine's kept\n%s", got, out)
	}
	if code, _, errOut := n.run(t, "--former-host", "x"); code != admin.ExitError || !strings.Contains(errOut, "need a liveness source") {
		t.Errorf("--former-host without a source: exit %d\n%s", code, errOut)
	}
}

// Issue 41, item 1: the rulebook's death rows through the dead-node sweep
// (gc --dead-nodes --apply, one sweep): a record of another node goes
// exactly when the rulebook says so.
func TestDeadNodeSweepAnswersTheRulebooksDeathRows(t *testing.T) {
	w := newDeadNodesWorld(t)
	w.calicoNode(t, "node2") // the sweeping node
	st := etcdstore.NewWithClient(w.etcd.Client(), config.DefaultEtcdPrefix, "", 5*time.Second)
	ctx := context.Background()
	for i, row := range rulebooktest.DeathRows {
		node := fmt.Sprintf("row%d", i)
		rec := row.Record(node, node, i, time.Now())
		rec.Network, rec.Handle = "k8s-pod-network", "k8s-pod-network."+node
		if _, err := st.ForNode(node).Swap(ctx, rec.Attachment, nil, rec); err != nil {
			t.Fatal(err)
		}
		if row.Known {
			w.calicoNode(t, node)
		}
		if row.Noted >= 0 {
			if err := st.NoteGone(ctx, "k8s-pod-network", node, row.Noted); err != nil {
				t.Fatal(err)
			}
		}
	}
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	if code, out := w.gc(t, conf, "--apply", "--dead-node-max-share=1"); code != admin.ExitOK {
		t.Fatalf("gc --dead-nodes: exit %d\n%s", code, out)
	}
	left := w.records(t)
	for i, row := range rulebooktest.DeathRows {
		name := fmt.Sprintf("row%d/row%d", i, i)
		if released := !slices.Contains(left, name); released != row.Release {
			t.Errorf("%s: released %v, the rulebook says %v", row.Name, released, row.Release)
		}
	}
}
