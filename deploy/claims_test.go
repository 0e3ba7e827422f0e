package deploy_test

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// deploy/safe-ipam-claims.yaml grants exactly the verbs the code does on
// AddressClaims (claims.Verbs), on nothing else, to Calico's CNI
// identities on both kinds of install; its CRD serves the group, version
// and resource the code names.
func TestClaimsManifestGrantsOnlyWhatTheCodeCalls(t *testing.T) {
	data, err := os.ReadFile("safe-ipam-claims.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(data, []byte("\n---\n"))
	if len(docs) != 3 {
		t.Fatalf("%d documents; want the CRD, the ClusterRole and its binding", len(docs))
	}
	var crd struct {
		Metadata struct{ Name string }
		Spec     struct {
			Group, Scope string
			Names        struct{ Plural, Kind string }
			Versions     []struct{ Name string }
		}
	}
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	for i, into := range []any{&crd, &role, &binding} {
		if err := yaml.Unmarshal(docs[i], into); err != nil {
			t.Fatal(err)
		}
	}
	if crd.Spec.Group != claims.Group || crd.Spec.Names.Plural != claims.Resource || crd.Spec.Names.Kind != claims.Kind ||
		crd.Spec.Scope != "Cluster" || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != claims.Version {
		t.Errorf("the CRD serves %+v; want %s/%s %s, cluster-scoped", crd.Spec, claims.Group, claims.Version, claims.Resource)
	}
	if len(role.Rules) != 1 {
		t.Fatalf("rules %+v; want one", role.Rules)
	}
	r := role.Rules[0]
	verbs := slices.Sorted(slices.Values(r.Verbs))
	if !reflect.DeepEqual(r.APIGroups, []string{claims.Group}) || !reflect.DeepEqual(r.Resources, []string{claims.Resource}) || !slices.Equal(verbs, claims.Verbs) {
		t.Errorf("ClusterRole grants %+v; want exactly %v on %s", r, claims.Verbs, claims.Resource)
	}
	var subjects []string
	for _, s := range binding.Subjects {
		subjects = append(subjects, s.Namespace+"/"+s.Name)
	}
	if binding.RoleRef.Name != role.Name || !slices.Equal(subjects, []string{"calico-system/calico-cni-plugin", "kube-system/calico-node"}) {
		t.Errorf("the binding gives %s to %v; want %s to the operator's and the manifests' CNI identities", binding.RoleRef.Name, subjects, role.Name)
	}
}
