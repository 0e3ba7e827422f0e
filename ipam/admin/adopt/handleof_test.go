package adopt

import (
	"net/netip"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Adopting a running pod records the handle Calico really keeps its
// address under: a KubeVirt pod's VM handle too, so that its DEL passes
// the pod's identity and the VM's other pods may share the address.
func TestHandleOf(t *testing.T) {
	att := record.Attachment{Network: "k8s-pod-network", ContainerID: "c1", IfName: "eth0"}
	addr := netip.MustParseAddr("10.244.0.5")
	tests := []struct {
		name, handle, pod string
		want              string
	}{
		{"Calico 3.x", "k8s-pod-network.c1", "web-0", "k8s-pod-network.c1"},
		{"Calico 2.x pod name", "default.web-0", "web-0", "default.web-0"},
		{"a VM's pod", "k8s-pod-network.vmi.default.vm1", "virt-launcher-vm1-abcde", "k8s-pod-network.vmi.default.vm1"},
		{"a VM's hashed handle", "k8s-pod-network.vmi._abc", "virt-launcher-vm1-abcde", "k8s-pod-network.vmi._abc"},
		{"a VM of another namespace", "k8s-pod-network.vmi.other.vm1", "virt-launcher-vm1-abcde", "fallback"},
		{"not a virt-launcher pod", "k8s-pod-network.vmi.default.vm1", "web-0", "fallback"},
		{"another's handle", "k8s-pod-network.c2", "web-0", "fallback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := HoldersFrom(&snapshot.Snapshot{Allocations: snapshot.NewAllocations(snapshot.Allocation{Addr: addr, Handle: tt.handle})})
			got := h.HandleOf(att, liveness.Running{PodNamespace: "default", PodName: tt.pod}, []netip.Addr{addr}, "fallback")
			if got != tt.want {
				t.Fatalf("HandleOf = %q; want %q", got, tt.want)
			}
		})
	}
}
