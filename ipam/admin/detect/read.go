// Package detect reads what the continuous check judges (package
// ipam/detect): every pod the API server holds, page by page, and
// Calico's allocations from a snapshot of its datastore; and keeps the
// check's findings as metrics. What runs it, elected once per cluster, is
// the next step of issue 47.
package detect

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// DefaultPage is how many pods one answer holds: a full listing of a
// 500,000-pod cluster is a thousand requests, once a period.
const DefaultPage = 500

// ReadPods lists every pod of the cluster, page by page from one
// consistent snapshot. Any error (an expired continuation, a refusal, a
// timeout) fails the whole read: a partial listing is never all pods.
func ReadPods(ctx context.Context, client kubernetes.Interface, page int64) ([]detect.Pod, error) {
	if page <= 0 {
		page = DefaultPage
	}
	opts := metav1.ListOptions{Limit: page}
	var out []detect.Pod
	// A few namespaces and nodes name every pod: one copy of each.
	names := map[string]string{}
	name := func(s string) string {
		if c, ok := names[s]; ok {
			return c
		}
		names[s] = s
		return s
	}
	for {
		list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the cluster's pods: %w", err)
		}
		if out == nil && list.RemainingItemCount != nil {
			// The first page says how many follow: one slice, never
			// copied as it grows (500,000 pods are some 80 MB of it). It
			// is the server's estimate: at most a million are taken on
			// its word.
			out = make([]detect.Pod, 0, len(list.Items)+int(min(max(*list.RemainingItemCount, 0), 1<<20)))
		}
		for i := range list.Items {
			p := detect.FromPod(&list.Items[i])
			p.Namespace, p.Node = name(p.Namespace), name(p.Node)
			out = append(out, p)
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return out, nil
		}
	}
}

// Allocations are Calico's allocations as the check reads them.
func Allocations(all snapshot.Allocations) []detect.Allocation {
	out := make([]detect.Allocation, 0, all.Len())
	for _, al := range all.All() {
		alt := al.Alternate()
		out = append(out, detect.Allocation{Addr: al.Addr, Handle: al.Handle, Namespace: al.Namespace, Pod: al.Pod, Node: al.Node,
			AltNamespace: alt[calico.AttrNamespace], AltPod: alt[calico.AttrPod]})
	}
	return out
}

// CalicoAllocations reads Calico's allocations from its datastore (etcd
// or the Kubernetes API, as calico-ipam reaches it with settings), once
// per call: one scan of its blocks alone (their attributes name each
// address's owner; the handles, one a pod, would be most of the cost and
// say nothing more), whole or failed.
func CalicoAllocations(settings datastore.Settings) func(ctx context.Context) ([]detect.Allocation, error) {
	return func(ctx context.Context) ([]detect.Allocation, error) {
		ds, closeDS, err := datastore.OpenCalico(ctx, settings)
		if err != nil {
			return nil, fmt.Errorf("Calico's datastore: %w", err)
		}
		defer closeDS()
		all, err := snapshot.LoadAllocations(ctx, ds)
		if err != nil {
			return nil, fmt.Errorf("reading Calico's allocations: %w", err)
		}
		return Allocations(all), nil
	}
}
