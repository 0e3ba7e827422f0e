package calicosim

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// vmWorld is the simulator, on etcd or on the Kubernetes datastore, with
// a real API server holding the KubeVirt objects calico-ipam looks up.
type vmWorld struct {
	t          *testing.T
	ctx        context.Context
	kubeconfig string
	vm         *VM
	// conf is the network config; plugin the simulator; state Calico's
	// data, on the world's datastore.
	conf   func() []byte
	plugin func() *Plugin
	state  func() *Snapshot
	// allocator writes the world's datastore as calico-ipam does.
	allocator func() *Allocator
}

// datastores are the two the VM tests run on.
var datastores = []string{"etcd", "kubernetes"}

func newVMWorld(t *testing.T, datastore string, standalone bool) *vmWorld {
	t.Helper()
	srv := kube.Get(t)
	w := &vmWorld{t: t, kubeconfig: srv.Kubeconfig}
	pool := poolSpec{"pool1", "10.244.0.0/16", 26}
	if datastore == "kubernetes" {
		k := newKDD(t, pool)
		w.ctx, w.state = k.ctx, k.state
		w.conf = func() []byte { return k.conf(nil) }
		w.plugin = func() *Plugin { return kddPlugin(ModernHandles) }
		w.allocator = func() *Allocator { return &Allocator{Kube: k.dyn, Node: node1} }
	} else {
		s := newSim(t, pool)
		w.ctx, w.state = s.ctx, s.state
		w.conf = func() []byte { return s.conf(map[string]any{"kubernetes": map[string]any{"kubeconfig": w.kubeconfig}}) }
		w.plugin = func() *Plugin { return s.plugin(ModernHandles) }
		w.allocator = func() *Allocator { return &Allocator{Client: s.cli, Node: node1} }
	}
	if err := InstallKubeVirtCRDs(w.ctx, srv.Config()); err != nil {
		t.Fatal(err)
	}
	dyn, err := newDynamic(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	vms++
	if w.vm, err = SeedVM(w.ctx, dyn, "default", fmt.Sprintf("vm%d", vms), standalone); err != nil {
		t.Fatal(err)
	}
	return w
}

// vms names each test's VM apart on the package's shared API server.
var vms int

func (w *vmWorld) launcher(name, migrationUID string) pod {
	w.t.Helper()
	srv := kube.Get(w.t)
	dyn, err := newDynamic(srv.Config())
	if err != nil {
		w.t.Fatal(err)
	}
	pod := pod{container: "c-" + name, namespace: "default", name: "virt-launcher-" + w.vm.Name + "-" + name}
	if _, err := SeedVirtLauncher(w.ctx, dyn, w.vm, pod.name, migrationUID); err != nil {
		w.t.Fatal(err)
	}
	return pod
}

func (w *vmWorld) add(p pod) (netip.Prefix, int) {
	w.t.Helper()
	res, err := w.plugin().Allocate(p.args(w.conf()))
	if err != nil || len(res.IPs) != 1 {
		w.t.Fatalf("ADD %s: %+v, %v", p.name, res, err)
	}
	return ipnetPrefix(w.t, res.IPs[0].Address.String()), len(res.Routes)
}

func (w *vmWorld) del(p pod) {
	w.t.Helper()
	if err := w.plugin().Del(p.args(w.conf())); err != nil {
		w.t.Fatalf("DEL %s: %v", p.name, err)
	}
}

func (w *vmWorld) handle() string {
	h, err := record.VMHandle(network, "default", w.vm.Name)
	if err != nil {
		w.t.Fatal(err)
	}
	return h
}

// owners are the active and alternate owner pods of addr, "" for none;
// held says whether addr is allocated under the VM's handle.
func (w *vmWorld) owners(addr netip.Prefix) (active, alternate string, held bool) {
	w.t.Helper()
	for _, b := range w.state().Blocks {
		ord, err := b.Block.Ordinal(addr.Addr())
		if err != nil {
			continue
		}
		if a, ok := b.Block.Attribute(ord); ok {
			return a.Secondary[calico.AttrPod], a.Alternate()[calico.AttrPod], a.Handle() == w.handle()
		}
	}
	return "", "", false
}

func (w *vmWorld) deleteVM() {
	w.t.Helper()
	dyn, err := newDynamic(kube.Get(w.t).Config())
	if err != nil {
		w.t.Fatal(err)
	}
	if err := DeleteVM(w.ctx, dyn, w.vm); err != nil {
		w.t.Fatal(err)
	}
}

// Issue 21: a live migration. The target pod is given the source's
// address with no routes, as its alternate owner; the source's DEL while
// the VM runs keeps the address; once the VM is being deleted, the
// target's DEL releases it.
func TestKubeVirtMigration(t *testing.T) {
	for _, ds := range datastores {
		t.Run(ds, func(t *testing.T) { vmMigration(t, newVMWorld(t, ds, false)) })
	}
}

func vmMigration(t *testing.T, w *vmWorld) {
	src := w.launcher("src", "")
	x, routes := w.add(src)
	if active, _, held := w.owners(x); !held || active != src.name || routes == 0 {
		t.Fatalf("source's %s: active %q, held by the VM's handle %v, %d routes", x, active, held, routes)
	}
	target := w.launcher("dst", "migration-1")
	if got, routes := w.add(target); got != netip.PrefixFrom(x.Addr(), 32) || routes != 0 {
		t.Fatalf("migration target got %s with %d routes; want %s/32 with none, as Calico reports a reused address", got, routes, x.Addr())
	}
	if active, alternate, _ := w.owners(x); active != src.name || alternate != target.name {
		t.Fatalf("owners %q / %q; want %s active, %s alternate", active, alternate, src.name, target.name)
	}
	w.del(src)
	if active, alternate, held := w.owners(x); !held || active != "" || alternate != target.name {
		t.Fatalf("after the source's DEL: held %v, owners %q / %q; want kept for %s", held, active, alternate, target.name)
	}
	w.deleteVM()
	w.del(target)
	if _, _, held := w.owners(x); held {
		t.Fatalf("%s still held after the VM's deletion and its last pod's DEL", x)
	}
	if _, left := w.state().Handles[w.handle()]; left {
		t.Fatal("the VM's handle is left")
	}
}

// Issue 21: a restart. A new pod of the VM gets the same address and
// becomes its owner; a late DEL of the old pod leaves it alone; the
// standalone VMI's deletion lets the last DEL release it.
func TestKubeVirtRestartAndLateDEL(t *testing.T) {
	for _, ds := range datastores {
		t.Run(ds, func(t *testing.T) { vmRestartAndLateDEL(t, newVMWorld(t, ds, true)) })
	}
}

func vmRestartAndLateDEL(t *testing.T, w *vmWorld) {
	a := w.launcher("a", "")
	y, _ := w.add(a)
	b := w.launcher("b", "")
	if got, routes := w.add(b); got != netip.PrefixFrom(y.Addr(), 32) || routes != 1 {
		t.Fatalf("the VM's new pod got %s with %d routes; want %s/32 with a route to it", got, routes, y.Addr())
	}
	w.del(a) // late: after b's ADD
	if active, _, held := w.owners(y); !held || active != b.name {
		t.Fatalf("after a late DEL of the old pod: held %v, active %q; want %s", held, active, b.name)
	}
	w.deleteVM()
	w.del(b)
	if _, _, held := w.owners(y); held {
		t.Fatalf("%s still held after the VMI's deletion and its pod's DEL", y)
	}
}

// A DEL of a virt-launcher pod that is gone does nothing, as calico-ipam's
// (its VM's other pod may hold the address).
func TestKubeVirtDELOfAGonePodDoesNothing(t *testing.T) {
	for _, ds := range datastores {
		t.Run(ds, func(t *testing.T) { vmDELOfAGonePod(t, newVMWorld(t, ds, false)) })
	}
}

func vmDELOfAGonePod(t *testing.T, w *vmWorld) {
	a := w.launcher("a", "")
	x, _ := w.add(a)
	gone := pod{container: "c-gone", namespace: "default", name: "virt-launcher-" + w.vm.Name + "-gone"}
	w.del(gone)
	if active, _, held := w.owners(x); !held || active != a.name {
		t.Fatalf("a gone pod's DEL changed %s: held %v, active %q", x, held, active)
	}
}

// A VM's handle released from outside (calicoctl ipam release) fails the
// DEL of its pod, as calico-ipam's does, until the pod is gone.
func TestKubeVirtDELAfterAnOutsideRelease(t *testing.T) {
	for _, ds := range datastores {
		t.Run(ds, func(t *testing.T) {
			w := newVMWorld(t, ds, false)
			a := w.launcher("a", "")
			w.add(a)
			w.deleteVM()
			if _, err := w.allocator().ReleaseHandle(w.ctx, w.handle()); err != nil {
				t.Fatal(err)
			}
			if err := w.plugin().Del(a.args(w.conf())); err == nil || !strings.Contains(err.Error(), "does not exist") {
				t.Fatalf("DEL with the VM's handle gone: %v; want it to fail", err)
			}
			dyn, err := newDynamic(kube.Get(t).Config())
			if err != nil {
				t.Fatal(err)
			}
			if err := DeletePod(w.ctx, dyn, a.namespace, a.name); err != nil {
				t.Fatal(err)
			}
			w.del(a)
		})
	}
}
