package runtime

import (
	"slices"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd/calls"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// What containerd 1.6 sends on the kubelet's path, which safe-ipam must
// handle: the pod's identity in CNI_ARGS on ADD and on both DELs (in
// random key order); StopPodSandbox's DEL with the netns and a
// prevResult; RemovePodSandbox's second DEL with neither; never CHECK, GC
// or STATUS.
func TestContainerdCNICalls(t *testing.T) {
	ctx := testContext(t)
	n := newNode(t, nodeOptions{safe: true, gen: testbed.Modern})
	pod := containerd.Pod{Namespace: "default", Name: "web-0", UID: podUID("web-0", 1)}
	id := n.run(ctx, pod)
	n.ip(ctx, id)
	n.remove(ctx, id)

	got := calls.Of(n.calls(), id)
	var cmds []string
	for _, c := range got {
		cmds = append(cmds, c.Command)
	}
	if !slices.Equal(cmds, []string{"ADD", "DEL", "DEL"}) {
		t.Fatalf("calls for sandbox %s: %v, want ADD, DEL (stop), DEL (remove)", id, cmds)
	}
	wantKeys := []string{"IgnoreUnknown", "K8S_POD_INFRA_CONTAINER_ID", "K8S_POD_NAME", "K8S_POD_NAMESPACE", "K8S_POD_UID"}
	for _, c := range got {
		keys := c.ArgKeys()
		t.Logf("%s CNI_ARGS key order: %v", c.Command, keys)
		slices.Sort(keys)
		if !slices.Equal(keys, wantKeys) {
			t.Errorf("%s CNI_ARGS %q: keys %v, want %v", c.Command, c.Args, keys, wantKeys)
		}
		if c.Arg("K8S_POD_NAMESPACE") != pod.Namespace || c.Arg("K8S_POD_NAME") != pod.Name || c.Arg("K8S_POD_UID") != pod.UID ||
			c.Arg("K8S_POD_INFRA_CONTAINER_ID") != id || c.Arg("IgnoreUnknown") != "1" {
			t.Errorf("%s CNI_ARGS %q do not name pod %s and sandbox %s", c.Command, c.Args, pod, id)
		}
		if c.IfName != testbed.IfName {
			t.Errorf("%s ifname %q", c.Command, c.IfName)
		}
	}
	if stop := got[1]; stop.NetNS == "" || !stop.PrevResult {
		t.Errorf("StopPodSandbox's DEL: netns %q, prevResult %v; want both", stop.NetNS, stop.PrevResult)
	}
	if remove := got[2]; remove.NetNS != "" || remove.PrevResult {
		t.Errorf("RemovePodSandbox's DEL: netns %q, prevResult %v; want neither", remove.NetNS, remove.PrevResult)
	}
	for _, c := range n.calls() {
		if c.Command != "ADD" && c.Command != "DEL" {
			t.Errorf("containerd 1.6 sent %s", c.Command)
		}
	}
	if left := n.leftovers(ctx); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
