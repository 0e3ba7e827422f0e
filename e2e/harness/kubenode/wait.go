package kubenode

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PauseImage is the kubelet's default sandbox image, the one an uninstall
// DaemonSet's waiting container names too; tests import the pause program
// under this tag, since nothing can be pulled.
const PauseImage = "registry.k8s.io/pause:3.10"

// WaitReady waits until the node is Ready and has no taints left.
func (n *Node) WaitReady(ctx context.Context) error {
	return n.waitNode(ctx, func(node *corev1.Node, ready corev1.ConditionStatus) bool {
		return ready == corev1.ConditionTrue && len(node.Spec.Taints) == 0
	})
}

// WaitUnreachable waits until the node lifecycle controller has found the
// node silent: Ready Unknown, and tainted unreachable, so no new pod is
// scheduled there.
func (n *Node) WaitUnreachable(ctx context.Context) error {
	return n.waitNode(ctx, func(node *corev1.Node, ready corev1.ConditionStatus) bool {
		return ready == corev1.ConditionUnknown && slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoSchedule
		})
	})
}

// waitNode polls the node's Node until done says so of it and of its
// Ready condition's status.
func (n *Node) waitNode(ctx context.Context, done func(*corev1.Node, corev1.ConditionStatus) bool) error {
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
				return done(node, c.Status), nil
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
