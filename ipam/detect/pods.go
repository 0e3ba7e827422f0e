package detect

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Calico's CNI plugin writes the first two on each pod it sets up on its
// Kubernetes datastore (the pod holds its workload endpoint); a pod may
// carry the third, addresses Calico gives it outside its IPAM.
const (
	AnnotationPodIP  = "cni.projectcalico.org/podIP"
	AnnotationPodIPs = "cni.projectcalico.org/podIPs"
	AnnotationNoIPAM = "cni.projectcalico.org/ipAddrsNoIpam"
)

// FromPod is what the check reads of a pod: its status's addresses, and
// Calico's annotation (podIPs, else podIP).
func FromPod(p *corev1.Pod) Pod {
	// A pod being deleted is no holder: Calico's DEL may have freed its
	// address, and a new pod hold it, before its status says so.
	out := Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Node: p.Spec.NodeName,
		Running: p.Spec.NodeName != "" && !p.Spec.HostNetwork && p.DeletionTimestamp == nil &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed}
	for _, ref := range p.OwnerReferences {
		if ref.Kind == "VirtualMachineInstance" && strings.HasPrefix(ref.APIVersion, "kubevirt.io/") {
			out.VM = p.Namespace + "/" + ref.Name
		}
	}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out.Status = append(out.Status, a)
		}
	}
	if len(out.Status) == 0 && p.Status.PodIP != "" {
		if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			out.Status = []netip.Addr{a}
		}
	}
	out.Annotated, out.AnnotationErr = annotated(p.Annotations)
	out.NoIPAM = p.Annotations[AnnotationNoIPAM] != ""
	return out
}

// annotated parses Calico's annotation: comma-separated CIDRs (one
// address each, /32 or /128), podIPs before podIP. Nil when neither is
// set.
func annotated(ann map[string]string) ([]netip.Addr, string) {
	v, ok := ann[AnnotationPodIPs]
	if !ok || v == "" {
		if v, ok = ann[AnnotationPodIP]; !ok || v == "" {
			return nil, ""
		}
	}
	var out []netip.Addr
	for _, s := range strings.Split(v, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Sprintf("%q: %v", v, err)
		}
		out = append(out, p.Addr())
	}
	return out, ""
}
