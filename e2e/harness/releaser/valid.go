package releaser

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Calico CNI's pod annotations (libcalico-go/lib/backend/k8s/conversion).
const (
	annotationPodIP    = "cni.projectcalico.org/podIP"
	annotationPodIPs   = "cni.projectcalico.org/podIPs"
	annotationAWSPodIP = "vpc.amazonaws.com/pod-ips"
)

// podLookup finds a pod: found false when the API server says it does not
// exist; err for any other failure, which counts as the pod existing.
type podLookup func(namespace, name string) (pod *corev1.Pod, found bool, err error)

// valid is allocationIsValid (kube-controllers' node/ipam.go): whether
// the allocation is still in use, as far as kube-controllers can tell.
// knode is the Kubernetes node of the allocation's Calico node, "" when
// that is gone. VM allocations count as valid: without KubeVirt's
// informers kube-controllers cannot judge them and keeps them.
func valid(a allocation, knode string, lookup podLookup) bool {
	if a.isTunnel() {
		return knode != ""
	}
	if a.isVM() || !a.isPod() {
		return true
	}
	p, found, err := lookup(a.attrs[attrNamespace], a.attrs[attrPod])
	if err != nil {
		return true
	}
	if !found {
		return false
	}
	// The pod was rescheduled: the allocation's node is not the pod's.
	if p.Spec.NodeName != "" && knode != "" && p.Spec.NodeName != knode {
		return false
	}
	if p.Status.PodIP == "" || len(p.Status.PodIPs) == 0 {
		return true // no address reported yet
	}
	if p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted" {
		return false
	}
	ips, ok := podIPs(p)
	return !ok || slices.Contains(ips, a.ip)
}

// podIPs are the addresses Calico's pod-to-endpoint conversion gives the
// pod: none once it is finished, else status.podIPs, status.podIP, then
// Calico's or AWS's annotations. ok is false when one does not parse:
// Calico then keeps the allocation.
func podIPs(p *corev1.Pod) (ips []netip.Addr, ok bool) {
	var raw []string
	switch {
	case len(p.Status.PodIPs) > 0:
		for _, ip := range p.Status.PodIPs {
			raw = append(raw, ip.IP)
		}
	case p.Status.PodIP != "":
		raw = []string{p.Status.PodIP}
	case p.Annotations[annotationPodIPs] != "":
		raw = strings.Split(p.Annotations[annotationPodIPs], ",")
	case p.Annotations[annotationPodIP] != "":
		raw = []string{p.Annotations[annotationPodIP]}
	case p.Annotations[annotationAWSPodIP] != "":
		raw = strings.Split(p.Annotations[annotationAWSPodIP], ",")
	}
	for _, s := range raw {
		ip, err := netip.ParseAddr(s)
		if pfx, perr := netip.ParsePrefix(s); perr == nil {
			ip, err = pfx.Addr(), nil
		}
		if err != nil {
			return nil, false
		}
		ips = append(ips, ip)
	}
	if finished(p) {
		return nil, true
	}
	return ips, true
}

// finished is Calico's IsFinished: a pod that no longer owns its
// addresses.
func finished(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		if ip, ok := p.Annotations[annotationPodIP]; ok && ip == "" {
			return true
		}
		if ips, ok := p.Annotations[annotationAWSPodIP]; ok && ips == "" {
			return true
		}
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded, "Completed":
		return true
	}
	return false
}
