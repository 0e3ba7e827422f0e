package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// userNamespace holds the service accounts that stand for test users.
const userNamespace = "kube-system"

// User makes a user that holds clusterRole only ("" for no role at all)
// and returns a kubeconfig for it. The user is a service account with a
// token from the TokenRequest API, so users can be made while the server
// runs; the binding is a ClusterRoleBinding named after the user.
func (s *Server) User(name, clusterRole string) (string, error) {
	c, cancel := ctx()
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: userNamespace}}
	if _, err := s.admin.CoreV1().ServiceAccounts(userNamespace).Create(c, sa, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("kubetest: user %s: %w", name, err)
	}
	if clusterRole != "" {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kubetest-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: userNamespace}}}
		if _, err := s.admin.RbacV1().ClusterRoleBindings().Create(c, crb, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("kubetest: bind %s to %s: %w", name, clusterRole, err)
		}
		if err := s.waitBound(c, name, clusterRole); err != nil {
			return "", err
		}
	}
	expiry := int64(time.Hour / time.Second)
	tr, err := s.admin.CoreV1().ServiceAccounts(userNamespace).CreateToken(c, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("kubetest: token for %s: %w", name, err)
	}
	if tr.Status.Token == "" {
		return "", errNoToken
	}
	return s.writeKubeconfig(name, tr.Status.Token)
}

// waitBound waits until the authorizer grants the user what its role
// allows: RBAC's cache learns of a new binding a moment after it is made,
// and a test that asks before then is refused.
func (s *Server) waitBound(c context.Context, user, clusterRole string) error {
	role, err := s.admin.RbacV1().ClusterRoles().Get(c, clusterRole, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kubetest: role %s: %w", clusterRole, err)
	}
	subject := "system:serviceaccount:" + userNamespace + ":" + user
	for _, rule := range role.Rules {
		if len(rule.Verbs) == 0 || len(rule.Resources) == 0 || len(rule.APIGroups) == 0 {
			continue // non-resource URLs and the like
		}
		attrs := &authorizationv1.ResourceAttributes{Verb: rule.Verbs[0], Group: rule.APIGroups[0], Resource: rule.Resources[0]}
		for {
			review, err := s.admin.AuthorizationV1().SubjectAccessReviews().Create(c, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: subject, ResourceAttributes: attrs}}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("kubetest: access review for %s: %w", user, err)
			}
			if review.Status.Allowed {
				break
			}
			select {
			case <-c.Done():
				return fmt.Errorf("kubetest: %s not granted %s %s/%s by %s: %w", user, attrs.Verb, attrs.Group, attrs.Resource, clusterRole, c.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// Apply creates every object of a multi-document YAML file (CRDs such as
// Calico's, ClusterRoles from deploy/), or updates it if it exists. A CRD
// is waited for until it is established, so the next document (or the
// caller) can use its kind.
func (s *Server) Apply(path string) error {
	return s.eachObject("apply", path, apply)
}

// Delete deletes every object of a multi-document YAML file, as `kubectl
// delete -f` does (in the foreground: a DaemonSet's pods go before it).
// Objects already gone are fine.
func (s *Server) Delete(path string) error {
	return s.eachObject("delete", path, func(c context.Context, r dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
		fg := metav1.DeletePropagationForeground
		err := r.Delete(c, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &fg})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// eachObject calls do with each object of the file at path and the
// resource it belongs to, in the file's order.
func (s *Server) eachObject(verb, path string, do func(context.Context, dynamic.ResourceInterface, *unstructured.Unstructured) error) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("kubetest: %s: %w", verb, err)
	}
	dyn, err := dynamic.NewForConfig(s.Config())
	if err != nil {
		return fmt.Errorf("kubetest: %s: %w", verb, err)
	}
	cached := memory.NewMemCacheClient(s.admin.Discovery())
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for i := 0; ; i++ {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("kubetest: %s %s: document %d: %w", verb, path, i, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		cached.Invalidate() // a CRD applied above adds kinds
		r, err := resourceOf(dyn, mapper, &obj)
		if err == nil {
			c, cancel := ctx()
			err = do(c, r, &obj)
			cancel()
		}
		if err != nil {
			return fmt.Errorf("kubetest: %s %s: document %d (%s %s): %w", verb, path, i, obj.GetKind(), obj.GetName(), err)
		}
	}
}

// resourceOf is the client of obj's resource, in its namespace if it has
// one (default when the object names none).
func resourceOf(dyn dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		return dyn.Resource(m.Resource).Namespace(ns), nil
	}
	return dyn.Resource(m.Resource), nil
}

func apply(c context.Context, r dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
	_, err := r.Create(c, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *unstructured.Unstructured
		if cur, err = r.Get(c, obj.GetName(), metav1.GetOptions{}); err == nil {
			obj.SetResourceVersion(cur.GetResourceVersion())
			_, err = r.Update(c, obj, metav1.UpdateOptions{})
		}
	}
	if err != nil || obj.GetKind() != "CustomResourceDefinition" {
		return err
	}
	return waitEstablished(c, r, obj.GetName())
}

func waitEstablished(c context.Context, r dynamic.ResourceInterface, name string) error {
	return wait.PollUntilContextCancel(c, 100*time.Millisecond, true, func(c context.Context) (bool, error) {
		crd, err := r.Get(c, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// Namespace creates namespace name unless it exists.
func (s *Server) Namespace(name string) error {
	c, cancel := ctx()
	defer cancel()
	_, err := s.admin.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubetest: namespace %s: %w", name, err)
	}
	return nil
}

// RunPod creates pod namespace/name bound to node, as the scheduler
// leaves it, and, when ips are given, reports them in its status as the
// kubelet does once the sandbox's network is up. No kubelet runs: the
// pod is an API object only.
func (s *Server) RunPod(namespace, name, node string, ips ...string) (*corev1.Pod, error) {
	if err := s.Namespace(namespace); err != nil {
		return nil, err
	}
	if err := s.ensureNode(node); err != nil {
		return nil, err
	}
	c, cancel := ctx()
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}
	pod, err := s.admin.CoreV1().Pods(namespace).Create(c, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubetest: pod %s/%s: %w", namespace, name, err)
	}
	if len(ips) == 0 {
		return pod, nil
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ips[0]
	for _, ip := range ips {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if pod, err = s.admin.CoreV1().Pods(namespace).UpdateStatus(c, pod, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("kubetest: pod %s/%s status: %w", namespace, name, err)
	}
	return pod, nil
}

// ensureNode registers node, Ready, unless it exists, as its kubelet
// would: the pods source speaks only for a Ready node.
func (s *Server) ensureNode(node string) error {
	c, cancel := ctx()
	defer cancel()
	if _, err := s.admin.CoreV1().Nodes().Get(c, node, metav1.GetOptions{}); err == nil {
		return nil
	}
	return s.SetNodeReady(node, true)
}

// SetNodeReady registers node (when it does not exist) with its Ready
// condition true or false, as its kubelet, or the node controller after a
// partition, reports it.
func (s *Server) SetNodeReady(node string, ready bool) error {
	c, cancel := ctx()
	defer cancel()
	nodes := s.admin.CoreV1().Nodes()
	n, err := nodes.Get(c, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err = nodes.Create(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("kubetest: node %s: %w", node, err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := nodes.UpdateStatus(c, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kubetest: node %s status: %w", node, err)
	}
	return nil
}

// DeletePod removes the pod for good: finalizers cleared and no grace
// period, as after the kubelet confirmed its containers stopped.
func (s *Server) DeletePod(namespace, name string) error {
	c, cancel := ctx()
	defer cancel()
	pods := s.admin.CoreV1().Pods(namespace)
	if pod, err := pods.Get(c, name, metav1.GetOptions{}); err == nil && len(pod.Finalizers) > 0 {
		pod.Finalizers = nil
		if _, err := pods.Update(c, pod, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("kubetest: clear finalizers of %s/%s: %w", namespace, name, err)
		}
	}
	zero := int64(0)
	err := pods.Delete(c, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubetest: delete pod %s/%s: %w", namespace, name, err)
	}
	return nil
}

// ServiceAccountKubeconfig is a self-contained kubeconfig (the CA
// inlined) for an existing service account, with a token from the
// TokenRequest API: what a pod of it would hold, for a cluster without
// the kubernetes Service's address (no kube-proxy here).
func (s *Server) ServiceAccountKubeconfig(namespace, name string) ([]byte, error) {
	c, cancel := ctx()
	defer cancel()
	expiry := int64(time.Hour / time.Second)
	tr, err := s.admin.CoreV1().ServiceAccounts(namespace).CreateToken(c, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubetest: token for %s/%s: %w", namespace, name, err)
	}
	ca, err := os.ReadFile(s.cafile)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	cfg := clientcmdConfig(s.URL, "", name, tr.Status.Token)
	cfg.Clusters["kubetest"].CertificateAuthorityData = ca
	return clientcmd.Write(*cfg)
}
