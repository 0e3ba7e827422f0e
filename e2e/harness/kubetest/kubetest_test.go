package kubetest_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
)

// calicoCRDs are the CRDs calico-ipam uses in Kubernetes-datastore mode,
// kept outside the repository (issue 12): the harness must serve them.
var calicoCRDs = calicodata.Path(calicodata.CRDs)

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The real server answers clients: a parseable /version (the build
// stamps it), the admin kubeconfig, Calico's CRDs and a ClusterRole
// applied, users with and without the role; and it is stopped by PID.
func TestKubeAPIServer(t *testing.T) {
	srv := kubetest.Start(t)
	admin := clientFor(t, srv.Kubeconfig)
	v, err := admin.Discovery().ServerVersion()
	if err != nil || v.GitVersion != "v1.33.13" || v.Major != "1" || v.Minor != "33" {
		t.Fatalf("/version: %+v, %v", v, err)
	}

	if err := srv.Apply(calicoCRDs); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []string{"ipamblocks", "ipamhandles", "blockaffinities", "ippools"} {
		gvr := schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: res}
		if _, err := dyn.Resource(gvr).List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Errorf("%s after Apply: %v", res, err)
		}
	}

	if err := srv.Apply(filepath.Join("..", "..", "..", "deploy", "safe-ipam-rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(filepath.Join("..", "..", "..", "deploy", "safe-ipam-rbac.yaml")); err != nil {
		t.Fatalf("applying again updates: %v", err)
	}
	for _, u := range []struct {
		name, role string
		allowed    bool
	}{{"reader", "safe-ipam", true}, {"nobody", "", false}} {
		kc, err := srv.User(u.name, u.role)
		if err != nil {
			t.Fatal(err)
		}
		_, err = clientFor(t, kc).CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
		if (err == nil) != u.allowed || (err != nil && !apierrors.IsForbidden(err)) {
			t.Errorf("user %s (role %q) listing pods: %v, want allowed %v", u.name, u.role, err, u.allowed)
		}
	}

	if _, err := srv.RunPod("t", "web-0", "node1", "10.244.0.5"); err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods("t").Get(t.Context(), "web-0", metav1.GetOptions{})
	if err != nil || pod.Spec.NodeName != "node1" || len(pod.Status.PodIPs) != 1 {
		t.Fatalf("pod %+v, %v", pod, err)
	}
	if err := srv.DeletePod("t", "web-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods("t").Get(t.Context(), "web-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("deleted pod: %v", err)
	}

	pid := srv.PID()
	srv.Stop()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("kube-apiserver %d still runs after Stop", pid)
	}
	if _, err := admin.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{}); err == nil {
		t.Fatal("a stopped server answered")
	}
}

// A missing binary is a clear error naming it, not a hang or a skip.
func TestKubeAPIServerBinaryFromEnvironment(t *testing.T) {
	t.Setenv("KUBE_APISERVER", filepath.Join(t.TempDir(), "missing"))
	_, err := kubetest.Binary()
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("err %v", err)
	}
}
