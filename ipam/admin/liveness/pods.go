package liveness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/kubeconfig"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// DefaultPodsTimeout bounds one read of the Kubernetes API: an API server
// that does not answer in time is unreadable, never empty (incident 003).
const DefaultPodsTimeout = 10 * time.Second

// DefaultPodsPage is the page size of the list: a node holds at most a
// few hundred pods, but a page bounds what one answer costs the API
// server.
const DefaultPodsPage = 500

// Pods is the Kubernetes API's view of one node: the attachments that
// should exist are the pods bound to it (spec.nodeName), with their
// namespace, name, UID and status.podIPs. The API names pods and their
// addresses, never containers or interfaces, so the view is PodsOnly: it
// judges pod-name handles and addresses, and no container ever looks gone
// in it.
//
// Every pod bound to the node is listed, whatever its phase: one with no
// address yet may be in its ADD, one being deleted (deletionTimestamp)
// may be in its DEL, and both may hold an address Calico has handed out.
// A finished pod (Succeeded, Failed) is listed by name, without the
// addresses its status may still show. The API speaks for a node only
// while the node is Ready: the pods of a partitioned node are force-deleted
// from the API while they still run there.
type Pods struct {
	// Kubeconfig is the kubeconfig file to reach the API server with.
	Kubeconfig string
	Node       string
	// Timeout bounds one Read; 0 means DefaultPodsTimeout.
	Timeout time.Duration
	// PageSize is how many pods one answer holds; 0 means DefaultPodsPage.
	PageSize int64
}

// Read lists the node's pods. An API error, a timeout or missing RBAC is
// an error, never "no pods".
func (p Pods) Read(ctx context.Context) (*View, error) {
	if p.Node == "" {
		return nil, errors.New("pods API: no node: the pods source speaks for one node (pass --node)")
	}
	if p.Kubeconfig == "" {
		return nil, errors.New("pods API: no kubeconfig file")
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultPodsTimeout
	}
	cfg, err := kubeconfig.Load(p.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("pods API: kubeconfig %w", err)
	}
	cfg.Timeout = timeout
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("pods API: kubeconfig %s: %w", p.Kubeconfig, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	page := p.PageSize
	if page <= 0 {
		page = DefaultPodsPage
	}
	if err := nodeReady(ctx, client, p.Node); err != nil {
		return nil, fmt.Errorf("pods API %s (kubeconfig %s): %w", cfg.Host, p.Kubeconfig, err)
	}
	atts, err := nodePods(ctx, client, p.Node, page)
	if err != nil {
		return nil, fmt.Errorf("pods API %s (kubeconfig %s): %w", cfg.Host, p.Kubeconfig, err)
	}
	v := NewView("pods API "+cfg.Host, p.Node, atts)
	v.PodsOnly = true
	return v, nil
}

// nodePods lists every pod bound to node, page by page. The pages come
// from one consistent snapshot; an expired continuation fails the read.
func nodePods(ctx context.Context, client kubernetes.Interface, node string, page int64) ([]Running, error) {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(), Limit: page}
	var atts []Running
	for {
		list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list pods on node %s: %w", node, err)
		}
		for i := range list.Items {
			a, err := podAttachment(&list.Items[i], node)
			if err != nil {
				return nil, err
			}
			atts = append(atts, a)
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return atts, nil
		}
	}
}

// podAttachment is what a pod says of itself. The container ID and
// ifname stay empty: the API does not know them.
func podAttachment(pod *corev1.Pod, node string) (Running, error) {
	if pod.Spec.NodeName != node {
		// The field selector failed to apply: trusting the answer would
		// mix nodes.
		return Running{}, fmt.Errorf("pod %s/%s is bound to node %q, not %q", pod.Namespace, pod.Name, pod.Spec.NodeName, node)
	}
	a := Running{PodNamespace: pod.Namespace, PodName: pod.Name, PodUID: string(pod.UID)}
	switch {
	case pod.Spec.HostNetwork:
		return a, nil // its IPs are the node's, not handed out by IPAM
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		// Finished: its DEL ran or runs, and Calico rightly frees the
		// address, which the status may still show. Listing the address
		// would call that an early release; the pod's name, listed, still
		// keeps its pod-name handle, and container handles are never
		// judged from this source.
		return a, nil
	}
	for _, ip := range pod.Status.PodIPs {
		a.IPs = append(a.IPs, ip.IP)
	}
	if len(a.IPs) == 0 && pod.Status.PodIP != "" {
		a.IPs = []string{pod.Status.PodIP}
	}
	return a, nil
}

// nodeReady refuses a node that is not Ready: when a node is cut off, its
// pods are deleted from the API (force-deleted, or by the taint manager)
// while their containers go on running there, so the API's list of its
// pods is not what runs.
func nodeReady(ctx context.Context, client kubernetes.Interface, node string) error {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s is not Ready (%s since %s): pods deleted from the API may still run there, so it cannot say what runs", node, c.Status, c.LastTransitionTime)
		}
	}
	return fmt.Errorf("node %s reports no Ready condition: the API cannot say what runs there", node)
}
