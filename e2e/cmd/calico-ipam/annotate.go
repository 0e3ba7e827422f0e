package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// annotationContainerID is the third annotation Calico's Kubernetes
// datastore keeps on a pod: the sandbox the other two are of.
const annotationContainerID = "cni.projectcalico.org/containerID"

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// annotatePod does what Calico's main plugin does on its Kubernetes
// datastore once a pod is wired (its workload endpoint lives in the
// pod): the pod's annotations name the sandbox and its addresses (the
// CIDRs of the result). On the etcd datastore it does nothing.
func annotatePod(stdin []byte, k8s podArgs, containerID string, res *current.Result) error {
	var ips []string
	for _, ip := range res.IPs {
		// One address each (/32, /128), as Calico writes them, not the
		// block's mask of the result.
		a, ok := netip.AddrFromSlice(ip.Address.IP)
		if !ok {
			return fmt.Errorf("the IPAM result's address %v", ip.Address)
		}
		a = a.Unmap()
		ips = append(ips, netip.PrefixFrom(a, a.BitLen()).String())
	}
	if len(ips) == 0 {
		return nil
	}
	return patchPod(stdin, k8s, map[string]any{detect.AnnotationPodIP: ips[0], detect.AnnotationPodIPs: strings.Join(ips, ","), annotationContainerID: containerID})
}

// unannotatePod is what Calico's DEL does there: the addresses' annotations
// cleared, only while they are this sandbox's (a late DEL of an old
// sandbox leaves the new one's).
func unannotatePod(stdin []byte, k8s podArgs, containerID string) error {
	return patchPod(stdin, k8s, nil, containerID)
}

// patchPod merges set into the pod's annotations, or, with set nil,
// clears the addresses' annotations while containerID is the pod's.
func patchPod(stdin []byte, k8s podArgs, set map[string]any, containerID ...string) error {
	conf, err := calicosim.ParseNetConf(stdin, "")
	if err != nil || conf.DatastoreType != calicosim.DatastoreKubernetes || k8s.K8S_POD_NAME == "" {
		return err
	}
	client, err := calicosim.NewKubeClient(conf.Kubernetes.Kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pods := client.Resource(podsResource).Namespace(string(k8s.K8S_POD_NAMESPACE))
	if set == nil {
		pod, err := pods.Get(ctx, string(k8s.K8S_POD_NAME), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the pod's annotations: %w", err)
		}
		if pod.GetAnnotations()[annotationContainerID] != containerID[0] {
			return nil
		}
		set = map[string]any{detect.AnnotationPodIP: "", detect.AnnotationPodIPs: ""}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return err
	}
	_, err = pods.Patch(ctx, string(k8s.K8S_POD_NAME), k8stypes.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil // a call of no pod the API server holds (cnitool's)
	}
	if err != nil {
		return fmt.Errorf("annotating the pod with its addresses: %w", err)
	}
	return nil
}
