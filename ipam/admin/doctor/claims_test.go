package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/cachedir"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// Issue 45: doctor checks, as the identity of Calico's CNI kubeconfig,
// that the API server serves AddressClaims and that the identity may do
// each verb the CNI binary and gc do (SelfSubjectAccessReviews), and
// names what is missing and where it is granted: the verbs on
// AddressClaims, and those on the dead-node sweeps' Lease. The identity
// with all is calico-node in kube-system, which deploy/'s bindings name.
func TestDoctorChecksTheClaims(t *testing.T) {
	srv := kubetest.Start(t)
	ctx := context.Background()
	cfgFor := func(kubeconfig string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"calico",
			"datastore_type":"kubernetes","kubernetes":{"kubeconfig":%q},"nodename":"node1","ipam":{"type":"safe-ipam"}}`, kubeconfig)))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	text := func(r *ClaimsReport) string {
		var b strings.Builder
		r.writeText(&b, "k8s-pod-network")
		return b.String()
	}
	if r := checkClaims(ctx, cfgFor(srv.Kubeconfig)); r == nil || r.On || !r.Unserved || !strings.Contains(text(r), "apply deploy/safe-ipam-claims.yaml") {
		t.Fatalf("without the CRD: %+v %q; want unserved", r, text(r))
	}
	if err := srv.Apply("../../../deploy/safe-ipam-claims.yaml"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		user, role       string
		missing, noLease []string
		says             string
	}{
		{"calico-node", "", nil, nil, "claims of k8s-pod-network: on"},
		{"claims-only", "safe-ipam-claims", nil, []string{"get leases", "update leases"}, "may not get leases, update leases"},
		{"viewer", "view", claims.Verbs, []string{"list nodes", "get leases", "update leases"}, "may not create, delete, get, list AddressClaims"},
	} {
		kc, err := srv.User(tt.user, tt.role)
		if err != nil {
			t.Fatal(err)
		}
		// deploy/'s bindings reach the authorizer's cache a moment later.
		var r *ClaimsReport
		for try := 0; try < 100; try++ {
			if r = checkClaims(ctx, cfgFor(kc)); r != nil && r.Error == "" && slices.Equal(r.Missing, tt.missing) && slices.Equal(r.MissingSweep, tt.noLease) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if r == nil || r.Error != "" || r.On != (tt.missing == nil) || !slices.Equal(r.Missing, tt.missing) || !slices.Equal(r.MissingSweep, tt.noLease) {
			t.Fatalf("%s: %+v; want missing %v, on the Lease %v", tt.user, r, tt.missing, tt.noLease)
		}
		if !strings.Contains(text(r), tt.says) {
			t.Errorf("%s: %q does not say %q", tt.user, text(r), tt.says)
		}
		t.Logf("%s: %s", tt.user, text(r))
	}
	// The watch's later full checks take a report with nothing wrong as
	// found (nine requests fewer on every node), until the node's CNI
	// calls or gc note claims not served.
	memo, watched := &Memo{}, cfgFor(srv.Kubeconfig)
	watched.CacheDir = t.TempDir()
	if r := memo.claimsOf(ctx, watched); r == nil || !r.fine() {
		t.Fatalf("the watch's first check: %+v; want nothing wrong", r)
	}
	if err := srv.Client().CoordinationV1().Leases(claims.LeaseNamespace).Delete(ctx, claims.LeaseName("k8s-pod-network"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := checkClaims(ctx, cfgFor(srv.Kubeconfig)); r == nil || !r.On || !strings.Contains(text(r), "the Lease kube-system/safe-ipam-sweep.k8s-pod-network does not exist") {
		t.Errorf("without the sweeps' Lease: %+v %q; want a warning naming it", r, text(r))
	}
	if r := memo.claimsOf(ctx, watched); r == nil || !r.fine() {
		t.Errorf("a later check of the watch: %+v; want the first's report, asking nothing", r)
	}
	if !cachedir.Put(watched.CacheDir, "claims-not-served", []byte(time.Now().UTC().Format(time.RFC3339Nano))) {
		t.Fatal("the note of claims not served was not written")
	}
	if r := memo.claimsOf(ctx, watched); r == nil || r.NoLease == "" {
		t.Errorf("a later check after a note of claims not served: %+v; want the API server asked again (the Lease is gone)", r)
	}
	if r := checkClaims(ctx, &config.Config{Store: config.Store{Type: config.StoreEtcd}, Calico: cfgFor(srv.Kubeconfig).Calico}); r != nil {
		t.Errorf("with the etcd store: %+v; want no claims report", r)
	}
}
