package deploy_test

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/ipam/about"
)

// detectObjects decodes deploy/safe-ipam-detect.yaml strictly, by kind.
func detectObjects(t *testing.T) (role rbacv1.ClusterRole, lease rbacv1.Role, d appsv1.Deployment) {
	t.Helper()
	b, err := os.ReadFile("safe-ipam-detect.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		var into any
		switch meta.Kind {
		case "ClusterRole":
			into = &role
		case "Role":
			into = &lease
		case "Deployment":
			into = &d
		default:
			continue
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			t.Fatalf("a %s does not decode strictly: %v", meta.Kind, err)
		}
	}
	return role, lease, d
}

// grants maps "group/resource" (with "@name" for a rule on named
// objects) to the verbs the rules grant.
func grants(rules []rbacv1.PolicyRule) map[string][]string {
	got := map[string][]string{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				key := g + "/" + res
				if len(r.ResourceNames) > 0 {
					key += "@" + strings.Join(r.ResourceNames, ",")
				}
				got[key] = append(got[key], r.Verbs...)
			}
		}
	}
	for k := range got {
		slices.Sort(got[k])
	}
	return got
}

// Issue 47: the check's manifest grants exactly what it calls (the
// cluster suite runs it with this RBAC), runs the image make image
// builds, the period stated in the docs, one instance at a time through
// the Lease its Role names, and no privilege.
func TestDetectManifest(t *testing.T) {
	role, lease, d := detectObjects(t)
	if want := map[string][]string{
		"/pods":                            {"list"},                    // every pod, paged
		"/events":                          {"create", "get", "update"}, // a finding's Event, counted again
		"crd.projectcalico.org/ipamblocks": {"list"},                    // Calico's allocations (KDD), its blocks alone
	}; !reflect.DeepEqual(grants(role.Rules), want) {
		t.Errorf("ClusterRole grants %v; want exactly %v", grants(role.Rules), want)
	}
	if want := map[string][]string{
		"coordination.k8s.io/leases":                  {"create"},
		"coordination.k8s.io/leases@safe-ipam-detect": {"get", "update"},
	}; lease.Namespace != "kube-system" || !reflect.DeepEqual(grants(lease.Rules), want) {
		t.Errorf("Role in %q grants %v; want exactly %v in kube-system", lease.Namespace, grants(lease.Rules), want)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
		t.Errorf("rolling update %+v; want maxSurge 0 (a surge pod finds its host port taken)", ru)
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want the check's one", len(spec.Containers))
	}
	c := spec.Containers[0]
	cmd := strings.Join(c.Command, " ")
	for _, arg := range []string{"/usr/local/bin/safe-ipam detect", "--every=2m", "--metrics-addr=:9256", "--lease=kube-system/safe-ipam-detect"} {
		if !strings.Contains(cmd, arg) {
			t.Errorf("the check runs %q; want %s in it", cmd, arg)
		}
	}
	if c.Image != about.Image {
		t.Errorf("it runs %s, want %s", c.Image, about.Image)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("its securityContext %+v; want no escalation, a read-only root, every capability dropped", sc)
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("it may run as root")
	}
	if spec.ServiceAccountName != "safe-ipam-detect" || len(spec.Volumes) != 0 {
		t.Errorf("service account %q, volumes %v; want its own account and no volume", spec.ServiceAccountName, spec.Volumes)
	}
}
