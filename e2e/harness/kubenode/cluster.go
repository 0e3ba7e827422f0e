package kubenode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// PauseImage is the kubelet's default sandbox image, the one an uninstall
// DaemonSet's waiting container names too; tests import the pause program
// under this tag, since nothing can be pulled.
const PauseImage = "registry.k8s.io/pause:3.10"

// WaitReady waits until the node is Ready and has no taints left.
func (n *Node) WaitReady(ctx context.Context) error {
	return poll(ctx, 100*time.Millisecond, func() (bool, error) {
		node, err := n.API.Client().CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue && len(node.Spec.Taints) == 0, nil
			}
		}
		return false, nil
	})
}

// WaitPodsReady waits until every pod of namespace that selector matches
// ("" all) is Ready, and there is at least one.
func (n *Node) WaitPodsReady(ctx context.Context, namespace, selector string) error {
	var last string
	err := poll(ctx, 200*time.Millisecond, func() (bool, error) {
		pods, err := n.API.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		last = ""
		for _, p := range pods.Items {
			if !PodReady(&p) {
				last += fmt.Sprintf(" %s is %s;", p.Name, p.Status.Phase)
			}
		}
		return len(pods.Items) > 0 && last == "", nil
	})
	if err != nil {
		return fmt.Errorf("pods %q in %s: %w (%s)", selector, namespace, err, last)
	}
	return nil
}

// PodReady says whether the pod's Ready condition is true.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// poll calls f every period until it says done, fails, or ctx ends.
func poll(ctx context.Context, period time.Duration, f func() (bool, error)) error {
	for {
		done, err := f()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(period):
		}
	}
}

// Apply creates every object of the manifest files, as `kubectl apply -f`
// does for objects that do not exist yet, and updates those that do.
func (n *Node) Apply(ctx context.Context, files ...string) error {
	return n.eachObject(ctx, files, func(ri dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
		_, err := ri.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cur, gerr := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			obj.SetResourceVersion(cur.GetResourceVersion())
			_, err = ri.Update(ctx, obj, metav1.UpdateOptions{})
		}
		return err
	})
}

// Delete deletes every object of the manifest files, as `kubectl delete
// -f` does (in the foreground: a DaemonSet's pods go with it).
func (n *Node) Delete(ctx context.Context, files ...string) error {
	fg := metav1.DeletePropagationForeground
	return n.eachObject(ctx, files, func(ri dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
		err := ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &fg})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

func (n *Node) eachObject(ctx context.Context, files []string, do func(dynamic.ResourceInterface, *unstructured.Unstructured) error) error {
	cfg := n.API.Config()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, file := range files {
		objs, err := readObjects(file)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", file, gvk, err)
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ns := obj.GetNamespace()
				if ns == "" {
					ns = "default"
				}
				ri = dyn.Resource(m.Resource).Namespace(ns)
			}
			if err := do(ri, obj); err != nil {
				return fmt.Errorf("%s: %s %s: %w", file, gvk.Kind, obj.GetName(), err)
			}
		}
	}
	return nil
}

// readObjects reads every object of a multi-document YAML file.
func readObjects(file string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}
