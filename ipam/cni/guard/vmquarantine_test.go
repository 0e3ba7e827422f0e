package guard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// Issue 31, item 3: a VM pod fenced from an address a running attachment
// holds keeps its allocation under its VM's handle, which no release by
// container reaches. The quarantine keeps the pod's identity and handle,
// and the holder's release passes them, so that calico-ipam's VM branch
// clears the pod's ownership and frees the handle of a deleted VM.
func TestAQuarantinedVMPodIsReleasedWithItsIdentity(t *testing.T) {
	const pod = "virt-launcher-vm2-x7k2p"
	forEachStore(t, func(t *testing.T, r *rig) {
		r.add("holder")
		r.freeBehindBack("net1.holder")
		r.calico = &fakeCalico{handle: "net1.vmi.default.vm2", owner: map[string]string{"namespace": "default", "pod": pod, "vmi-name": "vm2"}}
		e := env("late")
		e.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + pod + ";K8S_POD_UID=uid-late"
		if _, err := r.guardOver(r.store(), r.conf()).Add(context.Background(), e); cniCode(err) != types.ErrTryAgainLater {
			t.Fatalf("ADD of the VM pod given the holder's address = %v; want code 11", err)
		}
		holder := r.record("holder")
		if holder == nil || len(holder.Quarantined) != 1 {
			t.Fatalf("holder %+v; want one quarantine", holder)
		}
		if q := holder.Quarantined[0]; q.Handle != "net1.vmi.default.vm2" || q.PodName != pod || q.PodNamespace != "default" || q.PodUID != "uid-late" {
			t.Fatalf("quarantine %+v; want the VM's handle and the pod's identity", q)
		}
		before := len(r.calls("DEL"))
		r.del("holder")
		var withIdentity bool
		for _, c := range r.calls("DEL")[before:] {
			if c.ContainerID == "late" && strings.Contains(c.Args, "K8S_POD_NAME="+pod) && strings.Contains(c.Args, "K8S_POD_NAMESPACE=default") {
				withIdentity = true
			}
		}
		if !withIdentity {
			t.Fatalf("the holder's release passed no DEL with the quarantined VM pod's identity: %+v", r.calls("DEL")[before:])
		}
	})
}
