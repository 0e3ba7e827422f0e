package releaser

import (
	"errors"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValid(t *testing.T) {
	ip := netip.MustParseAddr("10.244.0.5")
	podAlloc := allocation{ip: ip, handle: "h", attrs: map[string]string{attrNamespace: "ns", attrPod: "web-0", attrNode: "a"}}
	running := func(node string, ips ...string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		for _, s := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: s})
		}
		if len(ips) > 0 {
			p.Status.PodIP = ips[0]
		}
		return p
	}
	evicted := running("a", ip.String())
	evicted.Status.Phase, evicted.Status.Reason = corev1.PodFailed, "Evicted"
	succeeded := running("a", ip.String())
	succeeded.Status.Phase = corev1.PodSucceeded
	unplugged := running("a", ip.String())
	unplugged.DeletionTimestamp = &metav1.Time{}
	unplugged.Annotations = map[string]string{annotationPodIP: ""}
	for _, tc := range []struct {
		name  string
		a     allocation
		knode string
		pod   *corev1.Pod
		err   error
		want  bool
	}{
		{name: "tunnel of a live node", a: allocation{ip: ip, handle: "t", attrs: map[string]string{attrType: "vxlanTunnelAddress"}}, knode: "a", want: true},
		{name: "tunnel of a gone node", a: allocation{ip: ip, handle: "t", attrs: map[string]string{attrType: "vxlanTunnelAddress"}}, want: false},
		{name: "no pod attributes", a: allocation{ip: ip, handle: "h", attrs: map[string]string{attrNode: "a"}}, knode: "a", want: true},
		{name: "VM allocation", a: allocation{ip: ip, handle: "h", attrs: map[string]string{attrNamespace: "ns", attrPod: "p", attrVMIName: "vm"}}, knode: "a", want: true},
		{name: "pod gone", a: podAlloc, knode: "a", want: false},
		{name: "lookup fails", a: podAlloc, knode: "a", err: errors.New("timeout"), want: true},
		{name: "pod on another node (12257)", a: podAlloc, knode: "a", pod: running("b", ip.String()), want: false},
		{name: "pod on another node, allocation's node gone", a: podAlloc, knode: "", pod: running("b", ip.String()), want: true},
		{name: "no address reported yet", a: podAlloc, knode: "a", pod: running("a"), want: true},
		{name: "evicted", a: podAlloc, knode: "a", pod: evicted, want: false},
		{name: "holds the address", a: podAlloc, knode: "a", pod: running("a", ip.String()), want: true},
		{name: "holds another address", a: podAlloc, knode: "a", pod: running("a", "10.244.0.6"), want: false},
		{name: "finished", a: podAlloc, knode: "a", pod: succeeded, want: false},
		{name: "being deleted, unplugged by Calico", a: podAlloc, knode: "a", pod: unplugged, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(ns, name string) (*corev1.Pod, bool, error) { return tc.pod, tc.pod != nil, tc.err }
			if got := valid(tc.a, tc.knode, lookup); got != tc.want {
				t.Errorf("valid = %t, want %t", got, tc.want)
			}
		})
	}
}
