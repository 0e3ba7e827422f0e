package audit_test

import (
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
)

// Issue 31, item 3: a VM's handle that no record holds is judged by its
// VM, which the audit does not read, so repair never releases it. But
// when no pod of the VM runs (Calico names no owner, or a source that
// speaks for pod names does not list the one it names), nothing frees it
// if the VM is gone: the audit reports it as a leak candidate, not only
// unverified. A VM pod that may run keeps it unverified.
func TestVMHandleWithoutARunningPodIsALeakCandidate(t *testing.T) {
	const handle = "net1.vmi.default.vm1"
	web := liveness.Running{ContainerID: "c1", IfName: "eth0", PodNamespace: "default", PodName: "web-0"}
	launcher := liveness.Running{ContainerID: "c2", IfName: "eth0", PodNamespace: "default", PodName: "virt-launcher-vm1-abcde"}
	tests := []struct {
		name  string
		owner map[string]string
		live  []liveness.Running
		want  audit.Kind
	}{
		{"its owner pod is not running", podAttrs("virt-launcher-vm1-abcde"), []liveness.Running{web}, audit.Leak},
		{"no pod owns it", nil, []liveness.Running{web}, audit.Leak},
		{"its owner pod runs", podAttrs("virt-launcher-vm1-abcde"), []liveness.Running{web, launcher}, audit.Unverified},
		{"the source cannot speak for pod names", podAttrs("virt-launcher-vm1-abcde"), []liveness.Running{{ContainerID: "c1", IfName: "eth0"}}, audit.Unverified},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			ip := w.allocate(blk, "node1", "net1.c1", podAttrs("web-0"))
			w.record("net1", "c1", "node1", ip, "web-0")
			vm := w.allocate(blk, "node1", handle, tt.owner)
			live := w.liveFile(tt.live...)
			_, rep, stderr := w.run(false, "--live", live)
			if found := findingOf(rep.Findings, handle); found.Kind != tt.want || found.Releasable {
				t.Fatalf("finding for %s = %+v; want %s, not releasable (%s)", handle, found, tt.want, stderr)
			}
			w.run(true, "--live", live, "--apply")
			if h := w.handle(handle); h.Block[blk] != 1 {
				t.Fatalf("repair --apply released the VM's address %s: handle %+v", vm, h)
			}
		})
	}
}

// findingOf is the finding about handle (a zero one when none).
func findingOf(findings []audit.Finding, handle string) audit.Finding {
	for _, f := range findings {
		if f.Handle == handle {
			return f
		}
	}
	return audit.Finding{}
}
