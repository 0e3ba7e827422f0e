package runtime

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd/calls"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// legacyWeb0 is the handle Calico 2.x gave the running web-0 before the
// cluster was upgraded.
const legacyWeb0 = "default.web-0"

// Scenario 2 on the kubelet's path: a cluster upgraded to Calico 3.x,
// where the running web-0 holds its address under the pod-name handle
// default.web-0. Another sandbox of web-0 then comes and goes: replaced
// (RunPodSandbox works, then StopPodSandbox and RemovePodSandbox), or
// failed (scenario 4: a plugin after IPAM fails ADD, and containerd sends
// its cleanup DEL at once). Calico 3.x's DEL also releases the pod-name
// handle; with safe-ipam the running pod keeps its address, and the
// sandbox that came and went leaves nothing.
func TestRuntimeUpgradedClusterSandbox(t *testing.T) {
	for _, tc := range []struct {
		name         string
		safe, failed bool
	}{
		{name: "replaced sandbox/calico-ipam alone"},
		{name: "replaced sandbox/safe-ipam", safe: true},
		{name: "failed sandbox/calico-ipam alone", failed: true},
		{name: "failed sandbox/safe-ipam", safe: true, failed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			n := newNode(t, nodeOptions{safe: tc.safe, gen: testbed.Modern, failAdd: tc.failed})
			live, err := calicosim.SeedLegacyHandle(ctx, n.cluster.Etcd, nodeName, legacyWeb0)
			if err != nil {
				t.Fatal(err)
			}
			pod := containerd.Pod{Namespace: "default", Name: "web-0", UID: podUID("web-0", 2)}
			if tc.failed {
				n.failedSandbox(ctx, pod)
			} else {
				n.remove(ctx, n.run(ctx, pod))
			}
			n.assertLiveAddress(ctx, live)
			for _, l := range n.leftovers(ctx) {
				if !strings.Contains(l, live.String()) && !strings.Contains(l, legacyWeb0) {
					t.Errorf("left behind: %s", l)
				}
			}
		})
	}
}

// failedSandbox runs a sandbox whose chain fails after IPAM allocated and
// checks that containerd answered with an error and an immediate DEL.
func (n *node) failedSandbox(ctx context.Context, pod containerd.Pod) {
	t := n.t
	t.Helper()
	if id, err := n.kube.RunPodSandbox(ctx, pod); err == nil || !strings.Contains(err.Error(), "failAdd") {
		t.Fatalf("RunPodSandbox with a failing plugin: sandbox %q, error %v; want the plugin's failure", id, err)
	}
	var id string
	for _, c := range n.calls() {
		if c.Command == "ADD" && c.Arg("K8S_POD_UID") == pod.UID {
			id = c.ContainerID
		}
	}
	var cmds []string
	for _, c := range calls.Of(n.calls(), id) {
		cmds = append(cmds, c.Command)
	}
	if len(cmds) < 2 || cmds[0] != "ADD" || cmds[1] != "DEL" {
		t.Errorf("calls for the failed sandbox %s: %v, want ADD then containerd's cleanup DEL", id, cmds)
	}
	sbs, err := n.kube.ListPodSandbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 0 {
		t.Errorf("after a failed RunPodSandbox the runtime lists %v", sbs)
	}
}

// assertLiveAddress checks Calico's data for the running pod's address:
// the control must show it freed, safe-ipam must keep it.
func (n *node) assertLiveAddress(ctx context.Context, live netip.Addr) {
	t := n.t
	t.Helper()
	snap, err := n.cluster.Calico(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, held := snap.Lookup(live)
	t.Logf("%s: the running web-0's %s: held=%v handle=%q", n.net.Label(), live, held, a.Handle)
	switch {
	case n.opt.safe && (!held || a.Handle != legacyWeb0):
		t.Errorf("the running pod's %s is no longer held by %s (held=%v, handle=%q)", live, legacyWeb0, held, a.Handle)
	case !n.opt.safe && held:
		t.Errorf("control: the running pod's %s is still held (%q); the failure did not reproduce", live, a.Handle)
	}
}
