package detect_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func pod(name, node string, status ...string) detect.Pod {
	return detect.Pod{Namespace: "default", Name: name, Node: node, Running: true, Status: addrs(status...), Annotated: addrs(status...)}
}

// brief is a finding as "kind address pods".
func brief(r detect.Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, string(f.Kind)+" "+f.Address.String()+" "+strings.Join(f.Pods, ","))
	}
	return out
}

func TestCheck(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	vm := func(p detect.Pod, name string) detect.Pod { p.VM = "default/" + name; return p }
	finished := func(p detect.Pod) detect.Pod { p.Running = false; return p }
	annotated := func(p detect.Pod, a ...string) detect.Pod { p.Annotated = addrs(a...); return p }
	tests := []struct {
		name string
		ev   detect.Evidence
		want []string
	}{
		{"clean", detect.Evidence{Pods: []detect.Pod{pod("a", "n1", "10.0.0.1"), pod("b", "n2", "10.0.0.2")}, PodsComplete: true, AllocsComplete: true}, nil},
		{"two running pods share an address, across nodes", detect.Evidence{Pods: []detect.Pod{pod("a", "n1", "10.0.0.1"), pod("b", "n2", "10.0.0.1")}, PodsComplete: true, AllocsComplete: true},
			[]string{"shared-address 10.0.0.1 default/a,default/b"}},
		{"a finished pod's stale status is no holder", detect.Evidence{Pods: []detect.Pod{finished(pod("a", "n1", "10.0.0.1")), pod("b", "n1", "10.0.0.1")}, PodsComplete: true, AllocsComplete: true}, nil},
		{"a live migration's two pods of one VM", detect.Evidence{Pods: []detect.Pod{vm(pod("src", "n1", "10.0.0.1"), "vm1"), vm(pod("dst", "n2", "10.0.0.1"), "vm1")}, PodsComplete: true, AllocsComplete: true}, nil},
		{"pods of two VMs are no migration", detect.Evidence{Pods: []detect.Pod{vm(pod("a", "n1", "10.0.0.1"), "vm1"), vm(pod("b", "n2", "10.0.0.1"), "vm2")}, PodsComplete: true, AllocsComplete: true},
			[]string{"shared-address 10.0.0.1 default/a,default/b"}},
		{"Calico's annotation names another address (issue 13858)", detect.Evidence{Pods: []detect.Pod{annotated(pod("a", "n1", "10.0.0.1"), "10.0.0.9")}, PodsComplete: true, AllocsComplete: true},
			[]string{"annotation-mismatch 10.0.0.1 default/a"}},
		{"dual stack in another order", detect.Evidence{Pods: []detect.Pod{annotated(pod("a", "n1", "10.0.0.1", "fd00::1"), "fd00::1", "10.0.0.1")}, PodsComplete: true, AllocsComplete: true}, nil},
		{"no status yet: the pod is starting", detect.Evidence{Pods: []detect.Pod{annotated(pod("a", "n1"), "10.0.0.9")}, PodsComplete: true, AllocsComplete: true}, nil},
		{"no annotation: not Calico's pod", detect.Evidence{Pods: []detect.Pod{annotated(pod("a", "n1", "10.0.0.1"))}, PodsComplete: true, AllocsComplete: true}, nil},
		{"pods not all read: every check unknown, nothing reported",
			detect.Evidence{Pods: []detect.Pod{pod("a", "n1", "10.0.0.1"), pod("b", "n2", "10.0.0.1")}, PodsComplete: false, AllocsComplete: true}, nil},
	}
	for _, tt := range tests {
		tt.ev.Now = now
		r := detect.Check(tt.ev, detect.NewGone())
		if got := brief(r); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		for _, k := range []detect.Kind{detect.SharedAddress, detect.AnnotationMismatch} { // gone-owner: TestGoneOwner
			if _, known := r.Count(k); known != tt.ev.PodsComplete {
				t.Errorf("%s: %s known %v, want %v", tt.name, k, known, tt.ev.PodsComplete)
			}
		}
	}
}

// A running pod of Calico's (it carries the annotation) whose address
// no allocation holds, or one holds for another pod, is an early
// release; an allocation naming no pod is not judged, nor are addresses
// Calico's annotation does not list; incomplete or mass evidence leaves
// the kind unknown.
func TestEarlyRelease(t *testing.T) {
	alloc := func(addr, ns, name string) detect.Allocation {
		return detect.Allocation{Addr: netip.MustParseAddr(addr), Handle: "k8s-pod-network.x", Namespace: ns, Pod: name, Node: "n1"}
	}
	held := []detect.Allocation{alloc("10.0.0.1", "default", "a")}
	tests := []struct {
		name     string
		pods     []detect.Pod
		allocs   []detect.Allocation
		complete bool
		want     []string
		known    bool
	}{
		{"held for its pod", []detect.Pod{pod("a", "n1", "10.0.0.1")}, held, true, nil, true},
		{"freed behind its back", []detect.Pod{pod("a", "n1", "10.0.0.1"), pod("b", "n1", "10.0.0.2")}, held, true, []string{"early-release 10.0.0.2 default/b"}, true},
		{"held for another pod", []detect.Pod{pod("b", "n1", "10.0.0.1")}, held, true, []string{"early-release 10.0.0.1 default/b"}, true},
		{"held under no pod's name", []detect.Pod{pod("a", "n1", "10.0.0.1")}, []detect.Allocation{alloc("10.0.0.1", "", "")}, true, nil, true},
		{"not Calico's pod", []detect.Pod{pod("a", "n1", "10.0.0.1"), func() detect.Pod { p := pod("b", "n1", "10.0.0.2"); p.Annotated = nil; return p }()}, held, true, nil, true},
		{"addresses of its own (ipAddrsNoIpam)", []detect.Pod{pod("a", "n1", "10.0.0.1"), func() detect.Pod { p := pod("b", "n1", "10.0.0.2"); p.NoIPAM = true; return p }()}, held, true, nil, true},
		{"a live migration's target, the alternate owner", []detect.Pod{vmPod("src", "10.0.0.1"), vmPod("dst", "10.0.0.1")},
			[]detect.Allocation{{Addr: netip.MustParseAddr("10.0.0.1"), Handle: "k8s-pod-network.vmi.x", Namespace: "default", Pod: "src", AltNamespace: "default", AltPod: "dst"}}, true, nil, true},
		{"no pod carries Calico's annotation (the etcd datastore)", []detect.Pod{func() detect.Pod { p := pod("b", "n1", "10.0.0.2"); p.Annotated = nil; return p }()}, held, true, nil, false},
		{"allocations not all read", []detect.Pod{pod("b", "n1", "10.0.0.2")}, held, false, nil, false},
		{"no allocation at all beside Calico's pods", []detect.Pod{pod("b", "n1", "10.0.0.2")}, nil, true, nil, false},
	}
	for _, tt := range tests {
		r := detect.Check(detect.Evidence{Pods: tt.pods, PodsComplete: true, Allocs: tt.allocs, AllocsComplete: tt.complete}, nil)
		if got := brief(r); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		if _, known := r.Count(detect.EarlyRelease); known != tt.known {
			t.Errorf("%s: known %v, want %v", tt.name, known, tt.known)
		}
	}
}

func vmPod(name, addr string) detect.Pod {
	p := pod(name, "n1", addr)
	p.VM = "default/vm1"
	return p
}

// Evidence that cannot be what runs is never clean: no pod at all makes
// every kind unknown, and a memory of missing owners younger than the
// leak grace (a restart, a new holder of the Lease) leaves gone-owner
// unknown, not 0, until it spans the grace.
func TestUnknownUntilTheEvidenceCanSpeak(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	live := detect.Allocation{Addr: netip.MustParseAddr("10.0.0.1"), Handle: "k8s-pod-network.a", Namespace: "default", Pod: "a", Node: "n1"}
	r := detect.Check(detect.Evidence{PodsComplete: true, AllocsComplete: true, Now: now}, detect.NewGone())
	for _, k := range detect.Kinds {
		if _, known := r.Count(k); known {
			t.Errorf("no pod at all: %s known", k)
		}
	}
	unannotated := func() detect.Pod { p := pod("b", "n1", "10.0.0.2"); p.Annotated = nil; return p }()
	etcd := detect.Check(detect.Evidence{Pods: []detect.Pod{unannotated}, PodsComplete: true, Allocs: []detect.Allocation{live}, AllocsComplete: true, Now: now, Unannotated: true}, nil)
	if !slices.Equal(etcd.NotApplicable, []detect.Kind{detect.AnnotationMismatch, detect.EarlyRelease}) || len(etcd.Findings) != 0 {
		t.Errorf("on Calico's etcd datastore: not applicable %v, findings %v; want annotation-mismatch and early-release, none", etcd.NotApplicable, brief(etcd))
	}
	gone := detect.NewGone()
	ev := detect.Evidence{Pods: []detect.Pod{pod("a", "n1", "10.0.0.1")}, PodsComplete: true, Allocs: []detect.Allocation{live}, AllocsComplete: true, LeakGrace: 15 * time.Minute}
	for _, step := range []struct {
		at    time.Duration
		known bool
	}{{0, false}, {14 * time.Minute, false}, {15 * time.Minute, true}} {
		ev.Now = now.Add(step.at)
		if _, known := detect.Check(ev, gone).Count(detect.GoneOwner); known != step.known {
			t.Errorf("a memory of %s: gone-owner known %v, want %v", step.at, known, step.known)
		}
	}
}

// Confirm keeps a first look's finding of a confirmed kind only where
// the second look makes it again (same address, same pods); a second
// look that could not judge a kind makes it unknown; gone-owner is kept
// as the first look judged it.
func TestConfirm(t *testing.T) {
	f := func(k detect.Kind, addr string, pods ...string) detect.Finding {
		return detect.Finding{Kind: k, Address: netip.MustParseAddr(addr), Pods: pods}
	}
	first := detect.Report{Unknown: map[detect.Kind]string{}, Warming: true, NotApplicable: []detect.Kind{detect.AnnotationMismatch}, Findings: []detect.Finding{
		f(detect.SharedAddress, "10.0.0.1", "default/a", "default/b"),
		f(detect.EarlyRelease, "10.0.0.2", "default/c"),
		f(detect.AnnotationMismatch, "10.0.0.3", "default/d"),
		f(detect.GoneOwner, "10.0.0.4", "default/e"),
	}}
	second := detect.Report{Unknown: map[detect.Kind]string{detect.GoneOwner: "no memory of earlier periods"}, Findings: []detect.Finding{
		f(detect.SharedAddress, "10.0.0.1", "default/a", "default/b"),
		f(detect.EarlyRelease, "10.0.0.2", "default/other"),
	}}
	got := detect.Confirm(first, second)
	if want := []string{"shared-address 10.0.0.1 default/a,default/b", "gone-owner 10.0.0.4 default/e"}; !slices.Equal(brief(got), want) {
		t.Errorf("confirmed %v, want %v", brief(got), want)
	}
	if _, known := got.Count(detect.GoneOwner); !known {
		t.Error("the second look's lack of memory made gone-owner unknown")
	}
	if !got.Warming || !slices.Equal(got.NotApplicable, first.NotApplicable) {
		t.Errorf("confirmed: warming %v, not applicable %v; want the first look's", got.Warming, got.NotApplicable)
	}
	second.Unknown[detect.EarlyRelease] = "Calico's allocations were not all read"
	if _, known := detect.Confirm(first, second).Count(detect.EarlyRelease); known {
		t.Error("a second look that could not judge early-release left it known")
	}
}

// An allocation whose owner pod is missing is reported once complete
// listings have missed it for the leak grace, not before; an owner that
// comes back (on the allocation's node, with its address), or an
// allocation released, starts the count again, and a pod of the owner's
// name elsewhere with another address is not its owner (as
// kube-controllers judges); an incomplete listing of Calico's
// allocations, or listings that cannot both be whole (no pod at all, no
// allocation at all beside Calico's pods), leave the kind unknown, and a
// detector without memory reports none.
func TestGoneOwner(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	leak := detect.Allocation{Addr: netip.MustParseAddr("10.0.0.5"), Handle: "k8s-pod-network.abc", Namespace: "default", Pod: "gone", Node: "n1"}
	live := detect.Allocation{Addr: netip.MustParseAddr("10.0.0.1"), Handle: "k8s-pod-network.def", Namespace: "default", Pod: "a", Node: "n1"}
	tunnel := detect.Allocation{Addr: netip.MustParseAddr("10.0.0.63"), Handle: "ipip-tunnel-addr-n1", Node: "n1"}
	gone := detect.NewGone()
	check := func(at time.Duration, pods []detect.Pod, allocs ...detect.Allocation) []string {
		return brief(detect.Check(detect.Evidence{Pods: pods, PodsComplete: true, Allocs: allocs, AllocsComplete: true, Now: start.Add(at), LeakGrace: 15 * time.Minute}, gone))
	}
	running := []detect.Pod{pod("a", "n1", "10.0.0.1")}
	want := []string{"gone-owner 10.0.0.5 default/gone"}
	recreated := detect.Allocation{Addr: netip.MustParseAddr("10.0.0.7"), Handle: "k8s-pod-network.ghi", Namespace: "default", Pod: "gone", Node: "n2"}
	steps := []struct {
		at     time.Duration
		pods   []detect.Pod
		want   []string
		allocs []detect.Allocation
	}{
		{0, running, nil, nil},
		{10 * time.Minute, running, nil, nil},
		{15 * time.Minute, running, want, nil},
		{20 * time.Minute, append(slices.Clone(running), pod("gone", "n1", "10.0.0.5")), nil, nil}, // back: the owner again
		{30 * time.Minute, running, nil, nil},                                                      // missing again since 30m
		{45 * time.Minute, running, want, nil},
		{46 * time.Minute, append(slices.Clone(running), pod("gone", "n2", "10.0.0.7")), want, []detect.Allocation{recreated}}, // recreated elsewhere: not the owner
	}
	for _, s := range steps {
		if got := check(s.at, s.pods, append([]detect.Allocation{leak, live, tunnel}, s.allocs...)...); !slices.Equal(got, s.want) {
			t.Errorf("at %s: %v, want %v", s.at, got, s.want)
		}
	}
	if got := check(50*time.Minute, running, live); len(got) != 0 || gone.Len() != 0 {
		t.Errorf("released: %v, remembered %v", got, gone)
	}
	r := detect.Check(detect.Evidence{Pods: running, PodsComplete: true, Allocs: []detect.Allocation{leak}, AllocsComplete: false, Now: start.Add(time.Hour)}, gone)
	if _, known := r.Count(detect.GoneOwner); known {
		t.Error("an incomplete listing of allocations judged the owners")
	}
	r = detect.Check(detect.Evidence{Pods: running, PodsComplete: true, Allocs: []detect.Allocation{leak}, AllocsComplete: true, Now: start.Add(time.Hour)}, nil)
	if _, known := r.Count(detect.GoneOwner); known {
		t.Error("a check without memory judged how long owners were gone")
	}
	for name, ev := range map[string]detect.Evidence{
		"no pod at all":        {PodsComplete: true, Allocs: []detect.Allocation{leak, live}, AllocsComplete: true},
		"no allocation at all": {Pods: running, PodsComplete: true, AllocsComplete: true},
	} {
		ev.Now = start.Add(2 * time.Hour)
		if _, known := detect.Check(ev, detect.NewGone()).Count(detect.GoneOwner); known {
			t.Errorf("%s: owners judged", name)
		}
	}
}

func TestFromPod(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0",
		Annotations:     map[string]string{detect.AnnotationPodIP: "10.0.0.1/32", detect.AnnotationPodIPs: "10.0.0.1/32,fd00::1/128"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: "vm1"}}},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}}}
	got := detect.FromPod(p)
	if !got.Running || got.VM != "default/vm1" || !slices.Equal(got.Status, addrs("10.0.0.1", "fd00::1")) || !slices.Equal(got.Annotated, addrs("10.0.0.1", "fd00::1")) {
		t.Errorf("%+v", got)
	}
	p.Annotations = map[string]string{detect.AnnotationPodIP: "10.0.0.1"}
	if got := detect.FromPod(p); got.AnnotationErr == "" {
		t.Errorf("an annotation without a prefix length parsed: %+v", got)
	}
	deleting := p.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if got := detect.FromPod(deleting); got.Running {
		t.Error("a pod being deleted counts as a holder: Calico's DEL may have freed its address already")
	}
	p.Spec.HostNetwork = true
	if got := detect.FromPod(p); got.Running {
		t.Error("a host-network pod counts as an IPAM holder")
	}
}
