package gc_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/gc"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// Issue 45: on Calico's Kubernetes datastore the DaemonSet's gc loops
// sweep the claims of dead nodes; one per cluster is elected, through the
// sweeps' Lease, as the identity of Calico's CNI kubeconfig
// (kube-system/calico-node, which deploy/safe-ipam-claims.yaml binds).
// Of two loops running at once, one leads and sweeps, the other says who
// does; the leader gives the Lease up when it stops. Without the manifest
// (the API server refuses that identity Leases and AddressClaims alike)
// no loop fails: there is nothing to sweep. With it but without the
// sweeps' Lease, every round fails and says so: a dead node's claims
// would stay.
func TestClaimSweepLoopsElectOne(t *testing.T) {
	srv := kubetest.Start(t)
	ctx := context.Background()
	for _, n := range []string{"node1", "node2"} {
		if _, err := srv.Client().CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "calico-ipam"), []byte(delegateScript), 0o755); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := srv.User("calico-node", "")
	if err != nil {
		t.Fatal(err)
	}
	conf := func(node string) string {
		path := filepath.Join(dir, node+".conflist")
		data := `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico","datastore_type":"kubernetes",
			"kubernetes":{"kubeconfig":"` + kubeconfig + `"},"nodename":"` + node + `",
			"ipam":{"type":"safe-ipam","delegate":{"type":"calico-ipam"},"logFile":"","cacheDir":"` + filepath.Join(dir, node) + `",
			"store":{"type":"file","dir":"` + filepath.Join(dir, node, "records") + `"}}}]}`
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	loops := func(rounds time.Duration) map[string]string {
		ctx, cancel := context.WithTimeout(ctx, rounds)
		defer cancel()
		outs := map[string]*bytes.Buffer{}
		done := make(chan struct{}, 2)
		for _, n := range []string{"node1", "node2"} {
			outs[n] = &bytes.Buffer{}
			go func() {
				gc.RunContext(ctx, []string{"--conf", conf(n), "--cni-bin-dir", dir, "--dead-nodes", "--apply", "--every", "200ms"}, outs[n], outs[n])
				done <- struct{}{}
			}()
		}
		<-done
		<-done
		return map[string]string{"node1": outs["node1"].String(), "node2": outs["node2"].String()}
	}
	for n, out := range loops(time.Second) {
		if !strings.Contains(out, "no claims to sweep") || strings.Contains(out, "leads") || strings.Contains(out, "error") {
			t.Fatalf("%s without the CRD: want nothing swept, no failure:\n%s", n, out)
		}
	}
	if err := srv.Apply("../../../deploy/safe-ipam-claims.yaml"); err != nil {
		t.Fatal(err)
	}
	waitGranted(t, srv, "system:serviceaccount:kube-system:calico-node")
	leases := srv.Client().CoordinationV1().Leases(claims.LeaseNamespace)
	lease, err := leases.Get(ctx, claims.LeaseName("k8s-pod-network"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := leases.Delete(ctx, lease.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for n, out := range loops(time.Second) {
		if !strings.Contains(out, "the dead-node sweeps' Lease does not exist") || strings.Contains(out, "leads") {
			t.Fatalf("%s without the sweeps' Lease: want each round to fail saying so:\n%s", n, out)
		}
	}
	lease.ResourceVersion = ""
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	outs := loops(2 * time.Second)
	var leaders []string
	for n, out := range outs {
		if strings.Contains(out, "this node leads the dead-node sweeps of network k8s-pod-network") {
			leaders = append(leaders, n)
		}
	}
	if len(leaders) != 1 {
		t.Fatalf("leaders %v; want one:\n%s", leaders, outs)
	}
	other := map[string]string{"node1": "node2", "node2": "node1"}[leaders[0]]
	if !strings.Contains(outs[other], leaders[0]+" sweeps the records of network k8s-pod-network; not this node") ||
		!strings.Contains(outs[leaders[0]], "liveness: Calico's Nodes (kubernetes), AddressClaims") {
		t.Errorf("the leader %s swept, the other said who does:\n%s", leaders[0], outs)
	}
	l, err := leases.Get(ctx, claims.LeaseName("k8s-pod-network"), metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		t.Errorf("after the loops stopped: %+v, %v; want the Lease given up", l, err)
	}
	// Uninstalled (docs/install.md): the manifest's objects go, the Lease
	// with them (being deleted: this API server runs no garbage collector
	// to finish kubetest's foreground deletes).
	if err := srv.Delete("../../../deploy/safe-ipam-claims.yaml"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		l, err := leases.Get(ctx, claims.LeaseName("k8s-pod-network"), metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && l.DeletionTimestamp != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after deleting deploy/safe-ipam-claims.yaml: %v; want the sweeps' Lease gone", err)
		}
	}
}

// waitGranted waits until the authorizer grants user what
// deploy/safe-ipam-claims.yaml binds it to: its bindings reach the
// authorizer's cache a moment after they are created.
func waitGranted(t *testing.T, srv *kubetest.Server, user string) {
	t.Helper()
	attrs := []*authorizationv1.ResourceAttributes{
		{Verb: "list", Group: claims.Group, Resource: claims.Resource},
		{Verb: "list", Resource: "nodes"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: claims.LeaseNamespace, Name: claims.LeaseName("k8s-pod-network")},
	}
	for _, a := range attrs {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			review, err := srv.Client().AuthorizationV1().SubjectAccessReviews().Create(context.Background(),
				&authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: a}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not granted %+v", user, a)
			}
		}
	}
}
