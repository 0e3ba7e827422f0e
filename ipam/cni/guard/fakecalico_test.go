package guard_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
)

// fakeCalico is Calico's data as a test sets it (guard.CalicoData): which
// Nodes exist and which handle keeps every address. What it is not given
// it cannot tell, as a Calico that does not answer; reads counts what the
// verbs asked.
type fakeCalico struct {
	nodes  map[string]bool
	handle string            // the handle every address is under
	owner  map[string]string // and the owner attributes of each
	// alternate is every allocation's alternate owner.
	alternate map[string]string
	// held is what the pod-name handle of a test keeps: address -> what
	// Calico records of it.
	held  map[netip.Addr]guard.Allocation
	reads int
}

var errNoCalico = errors.New("this test's Calico does not answer")

func (f *fakeCalico) NodeKnown(_ context.Context, node string) (bool, error) {
	f.reads++
	if f.nodes == nil {
		return false, errNoCalico
	}
	return f.nodes[node], nil
}

func (f *fakeCalico) Allocation(context.Context, netip.Addr) (guard.Allocation, error) {
	f.reads++
	if f.handle == "" {
		return guard.Allocation{}, errNoCalico
	}
	return guard.Allocation{Handle: f.handle, Owner: f.owner, Alternate: f.alternate}, nil
}

func (f *fakeCalico) HandleAllocations(context.Context, string) (map[netip.Addr]guard.Allocation, error) {
	f.reads++
	if f.held == nil {
		return nil, errNoCalico
	}
	return f.held, nil
}

// Issue 29: the verbs read Calico's data through guard.CalicoData, and only on
// their rare paths. An ordinary pod's ADD and DEL read nothing of it; a
// virt-launcher pod's ADD reads which handle keeps its address and records
// its VM's handle.
func TestOnlyRarePathsReadCalico(t *testing.T) {
	const vm = "net1.vmi.default.vm1"
	tests := []struct {
		name, pod string
		reads     int
		handle    string
	}{
		{name: "an ordinary pod", pod: "web-0", reads: 0, handle: "net1.c1"},
		{name: "a VM's pod", pod: "virt-launcher-vm1-x7k2p", reads: 1, handle: vm},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, r *rig) {
				r.calico = &fakeCalico{handle: vm, owner: map[string]string{"namespace": "default", "pod": tt.pod, "vmi-name": "vm1"}}
				g := r.guardOver(r.store(), r.conf())
				e := env("c1")
				e.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + tt.pod + ";K8S_POD_UID=uid-c1"
				ctx := context.Background()
				if _, err := g.Add(ctx, e); err != nil {
					t.Fatalf("ADD: %v", err)
				}
				if rec := r.record("c1"); rec == nil || rec.Handle != tt.handle {
					t.Fatalf("record %+v; want handle %s", rec, tt.handle)
				}
				if err := g.Del(ctx, e); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				if r.calico.reads != tt.reads {
					t.Fatalf("ADD and DEL read Calico %d times; want %d", r.calico.reads, tt.reads)
				}
			})
		})
	}
}

// Issue 33, finding 3: a pod's name is the tenant's choice, so a
// virt-launcher- prefix and a VM handle of the pod's namespace prove
// nothing. The ADD records (and later shares) a VM's handle only when
// Calico's allocation names this pod as its owner or alternate owner, and
// the handle is the one Calico names for the VMI those attributes name;
// otherwise it records the container's handle, and fencing applies.
func TestAVMHandleIsTrustedOnlyWhenCalicoNamesThisPod(t *testing.T) {
	const pod = "virt-launcher-vm1-x7k2p"
	this := map[string]string{"namespace": "default", "pod": pod, "vmi-name": "vm1"}
	other := map[string]string{"namespace": "default", "pod": "virt-launcher-vm2-aaaaa", "vmi-name": "vm2"}
	tests := []struct {
		name             string
		handle           string
		owner, alternate map[string]string
		want             string
	}{
		{"the owner is this pod", "net1.vmi.default.vm1", this, nil, "net1.vmi.default.vm1"},
		{"the alternate owner is this pod (a migration target)", "net1.vmi.default.vm1", other, this, "net1.vmi.default.vm1"},
		{"another VM's allocation", "net1.vmi.default.vm2", other, nil, "net1.c1"},
		{"no owner attributes", "net1.vmi.default.vm1", nil, nil, "net1.c1"},
		{"a hashed handle that is not this VMI's", "net1.vmi._AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", this, nil, "net1.c1"},
		{"the owner's VMI is not the handle's", "net1.vmi.default.vm1", map[string]string{"namespace": "default", "pod": pod, "vmi-name": "vm9"}, nil, "net1.c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "file")
			r.calico = &fakeCalico{handle: tt.handle, owner: tt.owner, alternate: tt.alternate}
			g := r.guardOver(r.store(), r.conf())
			e := env("c1")
			e.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + pod + ";K8S_POD_UID=uid-c1"
			if _, err := g.Add(context.Background(), e); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if rec := r.record("c1"); rec == nil || rec.Handle != tt.want {
				t.Fatalf("record %+v; want handle %s", rec, tt.want)
			}
		})
	}
}
