package deploy_test

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// deploy/safe-ipam-claims.yaml grants exactly the verbs the code does on
// AddressClaims (claims.Verbs), on nothing else, to Calico's CNI
// identities on both kinds of install, and on the sweeps' Lease
// (claims.LeaseVerbs) in its namespace only; its CRD serves the group, version
// and resource the code names.
func TestClaimsManifestGrantsOnlyWhatTheCodeCalls(t *testing.T) {
	data, err := os.ReadFile("safe-ipam-claims.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(data, []byte("\n---\n"))
	if len(docs) != 6 {
		t.Fatalf("%d documents; want the CRD, the ClusterRole and its binding, the sweeps' Lease, Role and its binding", len(docs))
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
	var lease coordinationv1.Lease
	var sweepRole rbacv1.Role
	var sweepBinding rbacv1.RoleBinding
	for i, into := range []any{&crd, &role, &binding, &lease, &sweepRole, &sweepBinding} {
		if err := yaml.Unmarshal(docs[i], into); err != nil {
			t.Fatal(err)
		}
	}
	if crd.Spec.Group != claims.Group || crd.Spec.Names.Plural != claims.Resource || crd.Spec.Names.Kind != claims.Kind ||
		crd.Spec.Scope != "Cluster" || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != claims.Version {
		t.Errorf("the CRD serves %+v; want %s/%s %s, cluster-scoped", crd.Spec, claims.Group, claims.Version, claims.Resource)
	}
	if len(role.Rules) != 2 {
		t.Fatalf("rules %+v; want two", role.Rules)
	}
	if n := role.Rules[1]; !reflect.DeepEqual(n.APIGroups, []string{""}) || !reflect.DeepEqual(n.Resources, []string{"nodes"}) || !reflect.DeepEqual(n.Verbs, []string{"list"}) {
		t.Errorf("ClusterRole's second rule %+v; want list nodes alone (the dead-node sweep)", n)
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
	if len(sweepRole.Rules) != 1 || sweepRole.Namespace != claims.LeaseNamespace {
		t.Fatalf("sweep Role in %q with rules %+v; want one rule in %s", sweepRole.Namespace, sweepRole.Rules, claims.LeaseNamespace)
	}
	r = sweepRole.Rules[0]
	name := claims.LeaseName("k8s-pod-network")
	if verbs := slices.Sorted(slices.Values(r.Verbs)); !reflect.DeepEqual(r.APIGroups, []string{"coordination.k8s.io"}) || !reflect.DeepEqual(r.Resources, []string{"leases"}) ||
		!slices.Equal(verbs, claims.LeaseVerbs) || !reflect.DeepEqual(r.ResourceNames, []string{name}) {
		t.Errorf("the sweep Role grants %+v; want exactly %v on the Lease %s alone", r, claims.LeaseVerbs, name)
	}
	if lease.Name != name || lease.Namespace != claims.LeaseNamespace {
		t.Errorf("the manifest's Lease is %s/%s; want %s/%s, the sweeps' of k8s-pod-network", lease.Namespace, lease.Name, claims.LeaseNamespace, name)
	}
	var sweepSubjects []string
	for _, s := range sweepBinding.Subjects {
		sweepSubjects = append(sweepSubjects, s.Namespace+"/"+s.Name)
	}
	if sweepBinding.RoleRef.Kind != "Role" || sweepBinding.RoleRef.Name != sweepRole.Name || sweepBinding.Namespace != claims.LeaseNamespace || !slices.Equal(sweepSubjects, subjects) {
		t.Errorf("the sweep binding gives %s %s to %v in %q; want %s to %v in %s", sweepBinding.RoleRef.Kind, sweepBinding.RoleRef.Name, sweepSubjects, sweepBinding.Namespace, sweepRole.Name, subjects, claims.LeaseNamespace)
	}
}
