package audit_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
)

// simAdd runs the simulator's ADD for a pod container, in the given
// handle generation, against the world's etcd, and returns the address.
func (w *world) simAdd(mode calicosim.HandleMode, cid, namespace, pod string) string {
	w.t.Helper()
	return w.simAddArgs(mode, cid, namespace, pod)
}

// simAddArgs is simAdd where an empty namespace and pod mean CNI_ARGS
// without pod identity, as safe-ipam's pod mode sends.
func (w *world) simAddArgs(mode calicosim.HandleMode, cid, namespace, pod string) string {
	w.t.Helper()
	ctx := context.Background()
	if err := calicosim.SeedIPPool(ctx, w.cli(), "default-ipv4-ippool", "10.244.0.0/24", 26); err != nil {
		w.t.Fatal(err)
	}
	if err := calicosim.SeedNode(ctx, w.cli(), "node1"); err != nil {
		w.t.Fatal(err)
	}
	env := map[string]string{calicosim.EnvLockFile: calicosim.NoLock, calicosim.EnvHandles: string(mode)}
	p := calicosim.New(func(k string) string { return env[k] }, &bytes.Buffer{}, &bytes.Buffer{})
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"calico-ipam","datastore_type":"etcdv3",
		"etcd_endpoints":%q,"nodename":"node1","ipam":{"type":"calico-ipam"}}`, w.etcd.Endpoint())
	args := "IgnoreUnknown=1;K8S_POD_INFRA_CONTAINER_ID=" + cid
	if namespace != "" {
		args += ";K8S_POD_NAMESPACE=" + namespace + ";K8S_POD_NAME=" + pod
	}
	res, err := p.Allocate(&skel.CmdArgs{ContainerID: cid, IfName: "eth0", Netns: "/var/run/netns/" + cid, StdinData: []byte(conf), Args: args})
	if err != nil {
		w.t.Fatal(err)
	}
	return res.IPs[0].Address.IP.String()
}

// Issue 9, defect 1: a Calico 2.x pod-name handle held by a running
// container, and a liveness file that lists that container without its
// pod or its addresses (a valid entry). Such a source cannot tell whether
// the pod runs, so repair must refuse, saying what the source lacks, and
// the address must stay allocated. A source that names pods may release
// the handle of a pod it does not list. Calico 2.x wrote no owner
// attributes, so the address's node is unknown (the block's affinity is
// not its node): only a source that speaks for every node judges it
// (issue 41, item 2.2; TestNodeLocalSourceOverABorrowedBlock).
func TestPodNameHandleNeedsASourceThatNamesPods(t *testing.T) {
	tests := []struct {
		name      string
		live      []liveness.Running
		released  bool
		refusedBy string
	}{
		{"entry without pod or addresses", []liveness.Running{{ContainerID: "v2era", IfName: "eth0"}}, false, "cannot speak for pod names"},
		{"one blind entry among named ones", []liveness.Running{{ContainerID: "other", IfName: "eth0", PodNamespace: "default", PodName: "db-0"},
			{ContainerID: "v2era", IfName: "eth0"}}, false, "1 of its 2 entries"},
		{"an unparsable address names nothing", []liveness.Running{{ContainerID: "v2era", IfName: "eth0", IPs: []string{"garbage"}}}, false, "cannot speak for pod names"},
		{"the pod is listed by name", []liveness.Running{{ContainerID: "v2era", IfName: "eth0", PodNamespace: "default", PodName: "web-0"}}, false, ""},
		{"the address is listed", nil, false, ""}, // filled in below with the address
		{"a source that names pods and lists another pod", []liveness.Running{{ContainerID: "other", IfName: "eth0", PodNamespace: "default", PodName: "db-0"}}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			ip := w.simAdd(calicosim.LegacyHandles, "v2era", "default", "web-0")
			live := tt.live
			if live == nil {
				live = []liveness.Running{{ContainerID: "v2era", IfName: "eth0", IPs: []string{ip + "/26"}}}
			}
			// Calico 2.x wrote no timestamps; --min-age 0 leaves the pod-name
			// rule as the only one that can hold the release back.
			code, rep, _ := w.run(true, "--live", w.liveFile(live...), "--node=", "--min-age", "0", "--apply")
			snap, err := calicosim.State(context.Background(), w.cli())
			if err != nil {
				t.Fatal(err)
			}
			held := len(snap.AllocationsOf("default.web-0")) == 1
			if held == tt.released {
				t.Fatalf("exit %d, address %s held %v, want released %v; actions %+v refused %+v", code, ip, held, tt.released, rep.Actions, rep.Refused)
			}
			if tt.released {
				return
			}
			if code != audit.ExitFindings || len(rep.Refused) != 1 || !strings.Contains(rep.Refused[0].Why, tt.refusedBy) {
				t.Fatalf("exit %d, refused %+v; want one refusal saying %q", code, rep.Refused, tt.refusedBy)
			}
		})
	}
}

// An allocation with no timestamp (Calico 2.x wrote none) has an unknown
// age: it may belong to an ADD still running. Repair judges it only when
// its settle wait is at least --min-age.
func TestUndatedAllocationWaitsForAFullSettle(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		released bool
	}{
		{"default settle is shorter than min-age", []string{"--settle", "0"}, false},
		{"settle at least min-age", []string{"--settle", "50ms", "--min-age", "50ms"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.simAdd(calicosim.LegacyHandles, "v2era", "default", "web-0")
			live := w.liveFile(liveness.Running{ContainerID: "other", IfName: "eth0", PodNamespace: "default", PodName: "db-0"})
			before := w.dump()
			code, rep, _ := w.run(true, append([]string{"--live", live, "--node=", "--apply"}, tt.args...)...)
			changed := !reflect.DeepEqual(before, w.dump())
			if changed != tt.released {
				t.Fatalf("exit %d, changed %v, want %v; actions %+v refused %+v", code, changed, tt.released, rep.Actions, rep.Refused)
			}
			if !tt.released && (len(rep.Refused) != 1 || !strings.Contains(rep.Refused[0].Why, "no timestamp")) {
				t.Fatalf("refused %+v; want the missing timestamp named", rep.Refused)
			}
		})
	}
}

// A running pod's address that Calico has free is an early release, in
// whichever form the source gives it: the CNI cache writes "10.0.0.1/26",
// CRI and the pods API a bare address.
func TestLiveAddressFreeInCalicoIsAnEarlyRelease(t *testing.T) {
	for _, form := range []string{"10.244.0.9/26", "10.244.0.9"} {
		t.Run(form, func(t *testing.T) {
			w := newWorld(t)
			w.allocate(blk, "node1", "net1.other", podAttrs("other"))
			live := w.liveFile(liveness.Running{ContainerID: "c9", IfName: "eth0", PodNamespace: "default", PodName: "web-9", IPs: []string{form}},
				liveness.Running{ContainerID: "other", IfName: "eth0", PodNamespace: "default", PodName: "other"})
			_, rep, _ := w.run(false, "--live", live)
			if f := find(rep.Findings, audit.EarlyRelease); f == nil || f.Address != "10.244.0.9" {
				t.Fatalf("findings %+v; want 10.244.0.9 early-released", rep.Findings)
			}
		})
	}
}

// Issue 41, item 2.2: a pod on node2 may hold an address of node1's block
// (borrowed). An allocation without owner attributes (Calico 2.x wrote
// none; a container handle may have none either) has no known node: a
// source that speaks for node1 only (its runtime) cannot say its owner is
// gone, so repair refuses, and the address stays. A source for every node
// judges it.
func TestNodeLocalSourceOverABorrowedBlock(t *testing.T) {
	tests := []struct {
		name     string
		seed     func(w *world) string // the handle
		node     string                // the source's --node
		released bool
	}{
		{"pod-name handle, node-local source", func(w *world) string {
			w.simAdd(calicosim.LegacyHandles, "v2era", "default", "web-0")
			return "default.web-0"
		}, "node1", false},
		{"container handle without owner attributes, node-local source", func(w *world) string {
			w.allocate(blk, "node1", "net1.borrowed", nil)
			return "net1.borrowed"
		}, "node1", false},
		{"pod-name handle, a source for every node", func(w *world) string {
			w.simAdd(calicosim.LegacyHandles, "v2era", "default", "web-0")
			return "default.web-0"
		}, "", true},
		{"container handle without owner attributes, a source for every node", func(w *world) string {
			w.allocate(blk, "node1", "net1.borrowed", nil)
			return "net1.borrowed"
		}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			handle := tt.seed(w)
			live := w.liveFile(liveness.Running{ContainerID: "other", IfName: "eth0", PodNamespace: "default", PodName: "db-0"})
			code, rep, _ := w.run(true, "--live", live, "--node="+tt.node, "--network", "net1", "--min-age", "0", "--settle", "10ms", "--apply")
			snap, err := calicosim.State(context.Background(), w.cli())
			if err != nil {
				t.Fatal(err)
			}
			if held := len(snap.AllocationsOf(handle)) == 1; held == tt.released {
				t.Fatalf("exit %d: %s held %v, want released %v; actions %+v refused %+v", code, handle, held, tt.released, rep.Actions, rep.Refused)
			}
			said := ""
			for _, f := range rep.Findings {
				if f.Handle == handle {
					said += f.Why + f.Unjudged
				}
			}
			if !tt.released && !strings.Contains(said, "no owner node") {
				t.Fatalf("findings %+v; want the unknown owner node named", rep.Findings)
			}
		})
	}
}

// Review of issue 41: a negative --min-age or --settle would take every
// allocation for old enough, turning the rulebook's grace off.
func TestNegativeAgesAreRefused(t *testing.T) {
	w := newWorld(t)
	for _, args := range [][]string{{"--min-age", "-1s"}, {"--settle", "-1s", "--apply"}} {
		if code, _, errOut := w.run(true, args...); code != audit.ExitError || !strings.Contains(errOut, "want durations of zero or more") {
			t.Errorf("%v: exit %d\n%s", args, code, errOut)
		}
	}
}
