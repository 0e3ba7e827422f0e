package runtime

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// Scenario 1 on the kubelet's path, with Calico 2.x handles: sandbox A of
// StatefulSet pod default/web-0 (UID u1) is replaced by sandbox B (UID
// u2); A's StopPodSandbox and RemovePodSandbox come late, while B runs;
// then a block's worth of new pods. Calico alone frees B's address with
// A's DELs and hands it to another pod, as two sandboxes'
// PodSandboxStatus show; with safe-ipam no address is handed out twice,
// and nothing is left once every pod is removed.
func TestRuntimeStatefulSetLateDel(t *testing.T) {
	for _, safe := range []bool{false, true} {
		t.Run(label(safe), func(t *testing.T) {
			ctx := testContext(t)
			n := newNode(t, nodeOptions{safe: safe, gen: testbed.Legacy, handles: "pod"})
			a := n.run(ctx, containerd.Pod{Namespace: "default", Name: "web-0", UID: podUID("web-0", 1)})
			b := n.run(ctx, containerd.Pod{Namespace: "default", Name: "web-0", UID: podUID("web-0", 2)})
			bAddr := n.ip(ctx, b)
			n.remove(ctx, a) // the late StopPodSandbox and RemovePodSandbox of A
			for i := range testbed.BlockAddrs {
				n.run(ctx, containerd.Pod{Namespace: "default", Name: fmt.Sprintf("app-%d", i), UID: podUID("app", i)})
			}
			dups := n.duplicates(ctx)
			t.Logf("%s: B %s holds %s; addresses in more than one sandbox: %v", n.net.Label(), containerd.Short(b), bAddr, dups)
			if safe {
				if len(dups) > 0 {
					t.Errorf("addresses held by more than one sandbox: %v", dups)
				}
			} else if holders := dups[bAddr]; len(holders) < 2 || !slices.Contains(holders, containerd.Short(b)) {
				t.Errorf("control: B's %s is reported by %v, want B and another sandbox; the failure did not reproduce", bAddr, holders)
			}
			n.removeAll(ctx)
			left := n.leftovers(ctx)
			switch {
			case safe && len(left) > 0:
				t.Errorf("after every pod was removed, still held: %v", left)
			case !safe:
				t.Logf("control: after every pod was removed, still held: %v", left)
			}
		})
	}
}

// duplicates maps each address that more than one READY sandbox reports
// in PodSandboxStatus to those sandboxes.
func (n *node) duplicates(ctx context.Context) map[netip.Addr][]string {
	n.t.Helper()
	sbs, err := n.kube.ListPodSandbox(ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	by := map[netip.Addr][]string{}
	for _, sb := range sbs {
		addr := n.ip(ctx, sb.Id)
		by[addr] = append(by[addr], containerd.Short(sb.Id))
	}
	for addr, ids := range by {
		if len(ids) < 2 {
			delete(by, addr)
		}
	}
	return by
}

func label(safe bool) string {
	if safe {
		return "safe-ipam"
	}
	return "calico-ipam alone"
}
