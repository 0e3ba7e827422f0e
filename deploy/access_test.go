package deploy_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
)

// The admin identity recipe on a real API server: the ServiceAccount's
// token (kubectl create token, here the TokenRequest API it calls) can do
// what the ClusterRole grants the admin commands, and nothing else.
func TestAdminAccessRecipe(t *testing.T) {
	srv := kubetest.Start(t)
	for _, f := range []string{"safe-ipam-rbac.yaml", "safe-ipam-admin-access.yaml"} {
		if err := srv.Apply(filepath.Join(".", f)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	expiry := int64(600)
	tok, err := srv.Client().CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "safe-ipam-admin",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for safe-ipam-admin: %v", err)
	}
	cfg := rest.AnonymousClientConfig(srv.Config())
	cfg.BearerToken = tok.Status.Token
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// RBAC may take a moment to see the binding.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = as.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node1"})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listing a node's pods as safe-ipam-admin: %v", err)
	}
	if _, err := as.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing secrets as safe-ipam-admin: %v; want forbidden", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if _, err := as.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("creating a pod as safe-ipam-admin: %v; want forbidden", err)
	}
}
