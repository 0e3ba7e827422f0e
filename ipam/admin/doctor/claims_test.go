package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// Issue 45: doctor checks, as the identity of Calico's CNI kubeconfig,
// that the API server serves AddressClaims and that the identity may do
// each verb the CNI binary and gc do (SelfSubjectAccessReviews), and
// names what is missing and where it is granted.
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
		user, role string
		missing    []string
	}{
		{"calico-cni", "safe-ipam-claims", nil},
		{"viewer", "view", claims.Verbs},
	} {
		kc, err := srv.User(tt.user, tt.role)
		if err != nil {
			t.Fatal(err)
		}
		r := checkClaims(ctx, cfgFor(kc))
		if r == nil || r.Error != "" || r.On != (tt.missing == nil) || !slices.Equal(r.Missing, tt.missing) {
			t.Fatalf("%s: %+v; want missing %v", tt.user, r, tt.missing)
		}
		if tt.missing != nil && !strings.Contains(text(r), "may not create, delete, get, list AddressClaims") {
			t.Errorf("%s: %q names not what is missing", tt.user, text(r))
		}
		t.Logf("%s: %s", tt.user, text(r))
	}
	if r := checkClaims(ctx, &config.Config{Store: config.Store{Type: config.StoreEtcd}, Calico: cfgFor(srv.Kubeconfig).Calico}); r != nil {
		t.Errorf("with the etcd store: %+v; want no claims report", r)
	}
}
