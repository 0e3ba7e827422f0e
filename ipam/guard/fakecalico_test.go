package guard_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

// fakeCalico is Calico's data as a test sets it (guard.Calico): which
// Nodes exist and which handle keeps every address. What it is not given
// it cannot tell, as a Calico that does not answer; reads counts what the
// verbs asked.
type fakeCalico struct {
	nodes  map[string]bool
	handle string // the handle every address is under
	reads  int
}

var errNoCalico = errors.New("this test's Calico does not answer")

func (f *fakeCalico) NodeKnown(_ context.Context, node string) (bool, error) {
	f.reads++
	if f.nodes == nil {
		return false, errNoCalico
	}
	return f.nodes[node], nil
}

func (f *fakeCalico) AllocationHandle(context.Context, netip.Addr) (string, error) {
	f.reads++
	if f.handle == "" {
		return "", errNoCalico
	}
	return f.handle, nil
}

func (f *fakeCalico) HandleAddrs(context.Context, string) ([]netip.Addr, error) {
	f.reads++
	return nil, errNoCalico
}

// Issue 29: the verbs read Calico's data through guard.Calico, and only on
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
				r.calico = &fakeCalico{handle: vm}
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
