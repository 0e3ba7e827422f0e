package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 21: KubeVirt VMs (Calico 3.32 and later). calico-ipam keeps a
// virt-launcher pod's address under its VM's handle, so that the VM keeps
// it across restarts and shares it with a live-migration target. Each
// scenario runs with calico-ipam alone (the control: Calico's own
// behaviour, which safe-ipam must keep) and with safe-ipam in front, with
// a file store per node and with the etcd store. The kubelet's calls go
// through cnitool with the pod's namespace, name, UID and sandbox ID;
// libcni gives DEL the ADD's result as prevResult. Calico's data is on
// etcd; a kube-apiserver holds the pods, VMs and VMIs calico-ipam looks
// up.
func TestKubeVirt(t *testing.T) {
	host.Require(t)
	srv := kubetest.Start(t)
	if err := srv.Namespace("default"); err != nil {
		t.Fatal(err)
	}
	if err := calicosim.InstallKubeVirtCRDs(context.Background(), srv.Config()); err != nil {
		t.Fatal(err)
	}
	dyn, err := calicosim.NewDynamic(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	scenarios := []struct {
		name, tag string
		run       func(v *vmBed)
	}{
		{"migrate", "vmm", vmMigrate},
		{"migration fails", "vmx", vmFailedMigration},
		{"restart", "vmr", vmRestart},
		{"late DEL", "vml", vmLateDEL},
		{"not a VM: an ordinary pod", "vmo", func(v *vmBed) { vmIntruder(v, false) }},
		{"not a VM: another VM's pod", "vmv", func(v *vmBed) { vmIntruder(v, true) }},
		{"fenced, then deleted", "vmd", vmFencedThenDeleted},
	}
	variants := []struct {
		name, tag       string
		safe, etcdStore bool
		// kdd keeps Calico's data in its Kubernetes datastore, on an API
		// server of the test's own, which holds the KubeVirt objects too.
		kdd bool
	}{
		{"calico-ipam alone", "c", false, false, false},
		{"safe-ipam, file store", "f", true, false, false},
		{"safe-ipam, etcd store", "e", true, true, false},
		{"Calico KDD, calico-ipam alone", "kc", false, false, true},
		{"Calico KDD, safe-ipam, etcd store", "ke", true, true, true},
	}
	for _, sc := range scenarios {
		for _, vr := range variants {
			t.Run(sc.name+"/"+vr.name, func(t *testing.T) {
				var v *vmBed
				if vr.kdd {
					v = newKDDVMBed(t, sc.tag+vr.tag, vr.safe, vr.etcdStore)
				} else {
					v = newVMBed(t, newCluster(t, sc.tag+vr.tag), sc.tag+vr.tag, srv.Kubeconfig, dyn, vr.safe, vr.etcdStore)
				}
				sc.run(v)
				v.requireNothingLeft()
			})
		}
	}
}

// vmMigrate: ADD source → X under the VM handle; ADD migration target (on
// the other node) → X; DEL source with the VM running → X kept, the
// source's owner cleared; the VM deleted; DEL target → X released.
func vmMigrate(v *vmBed) {
	vm := v.vm(false)
	src := v.launcher(vm, "node1", "src", "")
	x := v.add(src)
	v.requireOwners(x, vm, &src, nil)
	dst := v.launcher(vm, "node2", "dst", "migration-"+v.tag)
	if got := v.add(dst); got.Addr() != x.Addr() {
		v.t.Fatalf("the migration target got %s; want the source's %s", got, x)
	}
	v.requireOwners(x, vm, &src, &dst)
	v.del(src)
	v.requireOwners(x, vm, nil, &dst)
	v.auditKeeps(x)
	v.deleteVM(vm)
	v.del(dst)
}

// vmRestart: ADD pod A → Y; DEL A with the VM running → Y kept; the VMI
// recreated with pod B → Y; the VM deleted; DEL B → Y released.
func vmRestart(v *vmBed) {
	vm := v.vm(false)
	a := v.launcher(vm, "node1", "a", "")
	y := v.add(a)
	v.del(a)
	v.requireOwners(y, vm, nil, nil)
	v.auditKeeps(y)
	b := v.restart(vm, y)
	v.requireOwners(y, vm, &b, nil)
	v.deleteVM(vm)
	v.del(b)
}

// vmLateDEL: the old pod's DEL comes after the new pod's ADD (its pod
// object already deleted, as the kubelet's retries find it); the new
// pod's address and ownership stay.
func vmLateDEL(v *vmBed) {
	vm := v.vm(false)
	a := v.launcher(vm, "node1", "a", "")
	y := v.add(a)
	b := v.restart(vm, y)
	v.delGone(a)
	v.requireOwners(y, vm, &b, nil)
	v.requireHeldBy(y, b)
	v.deleteVM(vm)
	v.del(b)
}

// vmIntruder: the VM's address X is freed behind its pod's back, and
// Calico hands X to another pod: an ordinary one, or (otherVM) a pod of
// another VM. Then the VM goes, and a pod of the other VM (retried in a
// new sandbox) starts with the address its VM was given.
func vmIntruder(v *vmBed, otherVM bool) {
	vm := v.vm(false)
	a := v.launcher(vm, "node1", "a", "")
	x := v.add(a)
	p, unfill := v.intrude(vm, a, x, otherVM)
	defer unfill()
	v.deleteVM(vm)
	v.delGone(a)
	switch {
	case otherVM && v.safe:
		retry := v.launcher(p.vm, "node1", "retry", "")
		if got := v.add(retry); got.Addr() != x.Addr() {
			v.t.Fatalf("the other VM's retried pod got %s; want its %s", got, x)
		}
		v.deleteVM(p.vm)
		v.del(retry)
	case otherVM:
		v.deleteVM(p.vm)
		v.del(p)
	}
}

// vmFencedThenDeleted (issue 31, item 3): the VM's address X is freed
// behind its pod's back and Calico hands it, under its own VM's handle,
// to a pod of another VM, which safe-ipam fences. The operator deletes
// that VM instead of letting its pod retry: the pod's DELs answer from
// the quarantine. Then the first VM goes, and its pod's DEL releases the
// quarantine with the fenced pod's identity (its pod object still
// exists), so calico-ipam's VM branch frees the other VM's handle. With
// calico-ipam alone, the fenced pod's DEL frees it; before the fix, the
// handle stayed allocated forever.
func vmFencedThenDeleted(v *vmBed) {
	vm := v.vm(false)
	a := v.launcher(vm, "node1", "a", "")
	x := v.add(a)
	p, unfill := v.intrude(vm, a, x, true)
	defer unfill()
	v.deleteVM(p.vm)
	v.del(p)
	v.deleteVM(vm)
	v.delGone(a)
	if err := calicosim.DeletePod(v.ctx, v.dyn, p.sb.Pod.Namespace, p.sb.Pod.Name); err != nil {
		v.t.Fatal(err)
	}
}

// vmFailedMigration: the migration target's DEL comes first (the
// migration failed), with the VM running; the source keeps X, and X is
// still fenced from anyone else (the etcd store hands the target's index
// entries back to the source).
func vmFailedMigration(v *vmBed) {
	vm := v.vm(false)
	src := v.launcher(vm, "node1", "src", "")
	x := v.add(src)
	dst := v.launcher(vm, "node2", "dst", "migration-"+v.tag)
	if got := v.add(dst); got.Addr() != x.Addr() {
		v.t.Fatalf("the migration target got %s; want the source's %s", got, x)
	}
	v.del(dst)
	v.requireOwners(x, vm, &src, nil)
	_, unfill := v.intrude(vm, src, x, false)
	defer unfill()
	v.deleteVM(vm)
	v.delGone(src)
}

// intrude frees x behind holder's back (an outside release of vm's
// handle, as calicoctl ipam release does) and starts a pod Calico gives x
// to: an ordinary pod, or a pod of another VM. calico-ipam alone gives it
// x while holder holds it (that pod is then deleted again); safe-ipam
// fences it. unfill deletes the pods that cycled the block.
func (v *vmBed) intrude(vm *calicosim.VM, holder vmPod, x netip.Prefix, otherVM bool) (p vmPod, unfill func()) {
	v.t.Helper()
	alloc := &calicosim.Allocator{Client: v.c.Etcd, Kube: v.calico, Node: "node1"}
	if _, err := alloc.ReleaseHandle(v.ctx, v.vmHandle(vm)); err != nil {
		v.t.Fatal(err)
	}
	unfill = v.fillUntilNext(x)
	if otherVM {
		p = v.launcher(v.vm(false), "node1", "intruder", "")
	} else {
		p = v.pod("node1", testbed.Pod{Namespace: "default", Name: "intruder"})
	}
	res, err := v.nodes["node1"].Add(v.ctx, vmNetwork, p.sb)
	var cmdErr *testbed.CommandError
	switch {
	case !v.safe && err == nil:
		if got, _ := testbed.ResultIPv4(res); got.Addr() != x.Addr() {
			v.t.Fatalf("control: the intruder got %s; want the freed %s", got, x)
		}
		v.requireHeldBy(x, holder, p)
		v.t.Logf("control: %s is held by %s and by %s", x, holder.sb.Pod, p.sb.Pod)
		if !otherVM {
			v.del(p)
		}
	case v.safe && errors.As(err, &cmdErr) && strings.Contains(cmdErr.Message, "gave "+x.Addr().String()):
		v.t.Logf("fenced: %s", cmdErr.Message)
		v.del(p) // the kubelet's DEL of the failed sandbox
		v.requireHeldBy(x, holder)
	default:
		v.t.Fatalf("the intruder's ADD: %+v, %v", res, err)
	}
	return p, unfill
}

// vmNetwork is Calico's network name, as calico-node's conflist has it.
const vmNetwork = "k8s-pod-network"

// vmBed is two nodes sharing Calico's etcd, each with the network (through
// safe-ipam or not) and the kubeconfig calico-ipam looks VMs up with.
type vmBed struct {
	t     *testing.T
	ctx   context.Context
	tag   string
	c     *testbed.Cluster
	dyn   dynamic.Interface
	safe  bool
	nodes map[string]*testbed.Node
	nets  map[string]testbed.Network
	vms   int
	made  []testbed.Sandbox
	// calico reaches Calico's Kubernetes datastore; nil when it is etcd.
	calico dynamic.Interface
}

// vmPod is one sandbox of a pod, and the node it runs on.
type vmPod struct {
	sb   testbed.Sandbox
	node string
	vm   *calicosim.VM // nil for an ordinary pod
}

// newVMBed sets the two nodes up on c, with calico-ipam looking VMs up
// through kubeconfig (the API server dyn reaches).
func newVMBed(t *testing.T, c *testbed.Cluster, tag, kubeconfig string, dyn dynamic.Interface, safe, etcdStore bool) *vmBed {
	t.Helper()
	v := &vmBed{t: t, ctx: testContext(t), tag: tag, c: c, dyn: dyn, safe: safe,
		nodes: map[string]*testbed.Node{}, nets: map[string]testbed.Network{}}
	dumpOnFailure(t, v.c)
	if err := v.c.Seed(v.ctx, "node1", "node2"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node1", "node2"} {
		n := v.c.Node(name, testbed.Modern)
		var sc *testbed.SafeConfig
		if safe {
			var st *testbed.Store
			if etcdStore {
				s := testbed.EtcdStore(v.c.EtcdEndpoint, "/safe-ipam/v1")
				st = &s
			}
			sc = v.c.SafeConfig(n, "container", st)
		}
		net := v.c.Network(vmNetwork, "1.0.0", n, sc)
		net.Kubeconfig = kubeconfig
		if err := net.WriteConflist(n.ConfDir); err != nil {
			t.Fatal(err)
		}
		v.nodes[name], v.nets[name] = n, net
	}
	return v
}

// newKDDVMBed is newVMBed with Calico's data in the Kubernetes datastore
// of an API server of the test's own, which holds the VMs too.
func newKDDVMBed(t *testing.T, tag string, safe, etcdStore bool) *vmBed {
	t.Helper()
	c := newKubeCluster(t, tag)
	kd := c.Datastore.(testbed.KubeDatastore)
	if err := calicosim.InstallKubeVirtCRDs(context.Background(), kd.Config); err != nil {
		t.Fatal(err)
	}
	dyn, err := calicosim.NewDynamic(kd.Config)
	if err != nil {
		t.Fatal(err)
	}
	v := newVMBed(t, c, tag, kd.Kubeconfig, dyn, safe, etcdStore)
	v.calico = dyn
	return v
}

// vm creates a VM (and its VMI) named after the test.
func (v *vmBed) vm(standalone bool) *calicosim.VM {
	v.t.Helper()
	v.vms++
	vm, err := calicosim.SeedVM(v.ctx, v.dyn, "default", fmt.Sprintf("vm-%s-%d", v.tag, v.vms), standalone)
	if err != nil {
		v.t.Fatal(err)
	}
	return vm
}

func (v *vmBed) vmHandle(vm *calicosim.VM) string {
	v.t.Helper()
	h, err := record.VMHandle(vmNetwork, vm.Namespace, vm.Name)
	if err != nil {
		v.t.Fatal(err)
	}
	return h
}

// launcher creates the virt-launcher pod of vm and its sandbox on node.
func (v *vmBed) launcher(vm *calicosim.VM, node, suffix, migrationUID string) vmPod {
	v.t.Helper()
	name := "virt-launcher-" + vm.Name + "-" + suffix
	uid, err := calicosim.SeedVirtLauncher(v.ctx, v.dyn, vm, name, migrationUID)
	if err != nil {
		v.t.Fatal(err)
	}
	p := v.pod(node, testbed.Pod{Namespace: vm.Namespace, Name: name, UID: uid})
	p.vm = vm
	return p
}

// pod makes a sandbox of pod on node.
func (v *vmBed) pod(node string, pod testbed.Pod) vmPod {
	v.t.Helper()
	ns, err := v.c.Netns.Add(v.ctx, fmt.Sprintf("%s-%d", node, len(v.made)))
	if err != nil {
		v.t.Fatal(err)
	}
	sb := testbed.Sandbox{Pod: pod, Netns: ns}
	v.made = append(v.made, sb)
	return vmPod{sb: sb, node: node}
}

func (v *vmBed) add(p vmPod) netip.Prefix {
	v.t.Helper()
	res, err := v.nodes[p.node].Add(v.ctx, vmNetwork, p.sb)
	if err != nil {
		v.t.Fatalf("ADD of %s on %s: %v", p.sb.Pod, p.node, err)
	}
	x, err := testbed.ResultIPv4(res)
	if err != nil {
		v.t.Fatal(err)
	}
	return x
}

func (v *vmBed) del(p vmPod) {
	v.t.Helper()
	if err := v.nodes[p.node].Del(v.ctx, vmNetwork, p.sb); err != nil {
		v.t.Fatalf("DEL of %s on %s: %v", p.sb.Pod, p.node, err)
	}
}

// restart recreates vm's VMI and starts its next pod on node1, which
// must be given the VM's y.
func (v *vmBed) restart(vm *calicosim.VM, y netip.Prefix) vmPod {
	v.t.Helper()
	if err := calicosim.RecreateVMI(v.ctx, v.dyn, vm); err != nil {
		v.t.Fatal(err)
	}
	b := v.launcher(vm, "node1", "b", "")
	if got := v.add(b); got.Addr() != y.Addr() {
		v.t.Fatalf("the VM's next pod got %s; want its %s", got, y)
	}
	return b
}

// delGone deletes p's pod object, then runs its DEL, as the kubelet's
// retries find it late. (After its VM's handle was released from
// outside, calico-ipam's DEL of a pod that still exists fails: it finds
// no handle.)
func (v *vmBed) delGone(p vmPod) {
	v.t.Helper()
	if err := calicosim.DeletePod(v.ctx, v.dyn, p.sb.Pod.Namespace, p.sb.Pod.Name); err != nil {
		v.t.Fatal(err)
	}
	v.del(p)
}

func (v *vmBed) deleteVM(vm *calicosim.VM) {
	v.t.Helper()
	if err := calicosim.DeleteVM(v.ctx, v.dyn, vm); err != nil {
		v.t.Fatal(err)
	}
}

// requireOwners checks, in Calico's data, that x is allocated under vm's
// handle with active and alternate as its owner pods (nil: none).
func (v *vmBed) requireOwners(x netip.Prefix, vm *calicosim.VM, active, alternate *vmPod) {
	v.t.Helper()
	name := func(p *vmPod) string {
		if p == nil {
			return ""
		}
		return p.sb.Pod.Name
	}
	snap, err := v.c.Calico(v.ctx)
	if err != nil {
		v.t.Fatal(err)
	}
	for _, b := range snap.Blocks {
		ord, err := b.Block.Ordinal(x.Addr())
		if err != nil {
			continue
		}
		a, ok := b.Block.Attribute(ord)
		if !ok || a.Handle() != v.vmHandle(vm) {
			v.t.Fatalf("%s is not allocated under %s (allocated %v, handle %q)", x, v.vmHandle(vm), ok, a.Handle())
		}
		if got, alt := a.Secondary[calico.AttrPod], a.Alternate()[calico.AttrPod]; got != name(active) || alt != name(alternate) {
			v.t.Fatalf("%s: owner %q, alternate %q; want %q, %q", x, got, alt, name(active), name(alternate))
		}
		return
	}
	v.t.Fatalf("no block holds %s", x)
}

// requireHeldBy checks that exactly these sandboxes hold x in their netns.
func (v *vmBed) requireHeldBy(x netip.Prefix, pods ...vmPod) {
	v.t.Helper()
	var want []testbed.Sandbox
	for _, p := range pods {
		want = append(want, p.sb)
	}
	h, err := testbed.Observe(v.ctx, v.made)
	if err != nil {
		v.t.Fatal(err)
	}
	var got []string
	for _, sb := range h.Holders(x.Addr()) {
		got = append(got, sb.Netns.Name)
	}
	var wantNames []string
	for _, sb := range want {
		wantNames = append(wantNames, sb.Netns.Name)
	}
	slices.Sort(got)
	slices.Sort(wantNames)
	if !slices.Equal(got, wantNames) {
		v.t.Fatalf("%s is held by netns %v; want %v", x, got, wantNames)
	}
}

// fillUntilNext allocates ordinary pods through calico-ipam alone until
// x is the next address node1's block hands out; the returned func
// deletes them.
func (v *vmBed) fillUntilNext(x netip.Prefix) (unfill func()) {
	v.t.Helper()
	alone := calicoAlone(v.t, v.c, "node1")
	var fillers []testbed.Sandbox
	unfill = func() {
		for _, sb := range fillers {
			if err := alone.Del(v.ctx, calicoNetwork, sb); err != nil {
				v.t.Fatal(err)
			}
		}
	}
	for i := 0; ; i++ {
		snap, err := v.c.Calico(v.ctx)
		if err != nil {
			v.t.Fatal(err)
		}
		for _, b := range snap.Blocks {
			if b.Block.CIDR.Contains(x.Addr()) && len(b.Free) > 0 && b.Free[0] == x.Addr() {
				return unfill
			}
		}
		if i > testbed.BlockAddrs {
			v.t.Fatalf("%s never came up next", x)
		}
		filler := v.pod("node1", testbed.Pod{Namespace: "default", Name: fmt.Sprintf("filler-%d", i)})
		if _, err := alone.Add(v.ctx, calicoNetwork, filler.sb); err != nil {
			v.t.Fatal(err)
		}
		fillers = append(fillers, filler.sb)
	}
}

// auditKeeps runs safe-ipam's audit and repair --apply on node1's data
// while the VM exists: neither may free the VM's address.
func (v *vmBed) auditKeeps(x netip.Prefix) {
	v.t.Helper()
	if !v.safe {
		return
	}
	conf := v.nodes["node1"].ConfDir + "/" + vmNetwork + ".conflist"
	for _, args := range [][]string{
		{"audit", "--conf", conf, "--json"},
		{"repair", "--conf", conf, "--min-age", "0s", "--settle", "0s", "--apply"},
	} {
		out, code := v.admin(args...)
		v.t.Logf("safe-ipam %s: exit %d\n%s", args[0], code, out)
	}
	snap, err := v.c.Calico(v.ctx)
	if err != nil {
		v.t.Fatal(err)
	}
	if _, held := snap.Lookup(x.Addr()); !held {
		v.t.Fatalf("audit or repair freed the VM's %s while the VM exists", x)
	}
}

// admin runs an admin command of safe-ipam and returns its output and
// exit code.
func (v *vmBed) admin(args ...string) (string, int) {
	v.t.Helper()
	return runSafeIPAM(v.ctx, v.t, v.c.Bin, args...)
}

// requireNothingLeft: every address, handle and record is gone.
func (v *vmBed) requireNothingLeft() {
	v.t.Helper()
	var left []string
	for name := range v.nodes {
		l, err := v.c.Leftovers(v.ctx, vmNetwork, v.nets[name].Safe)
		if err != nil {
			v.t.Fatal(err)
		}
		left = append(left, l...)
	}
	slices.Sort(left)
	if left = slices.Compact(left); len(left) > 0 {
		v.t.Errorf("left behind: %v", left)
	}
}
