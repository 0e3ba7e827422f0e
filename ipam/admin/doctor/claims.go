package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// ClaimsReport says whether a network's records get their cluster-wide
// claims: the API server serves AddressClaims, and the identity of
// Calico's CNI kubeconfig (which the CNI binary and gc use) may do each
// of claims.Verbs, as its SelfSubjectRulesReviews answer (or, where they
// cannot, SelfSubjectAccessReviews), and each of
// claims.LeaseVerbs on the dead-node sweeps' Lease. Without them the
// node fences its own records only: a warning, not a problem.
// Without the Lease, or the verbs on it, no node sweeps the claims of
// dead nodes, which then fence their addresses until removed by hand: a
// warning too.
type ClaimsReport struct {
	On bool `json:"on"`
	// Kubeconfig is Calico's CNI kubeconfig, whose identity is checked.
	Kubeconfig string `json:"kubeconfig"`
	// Unserved: the API server serves no AddressClaims.
	Unserved bool `json:"unserved,omitempty"`
	// Missing are the verbs the identity may not do on AddressClaims;
	// MissingSweep, what the dead-node sweep needs and it may not do
	// ("list nodes", "get leases").
	Missing      []string `json:"missing,omitempty"`
	MissingSweep []string `json:"missingSweep,omitempty"`
	// NoLease names the sweeps' Lease when it does not exist.
	NoLease string `json:"noLease,omitempty"`
	Error   string `json:"error,omitempty"`
}

// checkClaims checks the claims of cfg's records; nil where none are kept.
func checkClaims(ctx context.Context, cfg *config.Config) *ClaimsReport {
	if !claims.Kept(cfg) {
		return nil
	}
	out := &ClaimsReport{Kubeconfig: cfg.Calico.Kubeconfig}
	kube, err := kubeapi.New(cfg.Calico.Kubeconfig, 5*time.Second)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	var list struct{}
	switch err := kube.Get(ctx, claims.Collection+"?limit=1", &list); {
	case errors.Is(err, kubeapi.ErrNoResource):
		out.Unserved = true
	case err != nil && !errors.Is(err, kubeapi.ErrForbidden):
		out.Error = err.Error()
		return out
	}
	rv := &reviewer{kube: kube}
	out.Missing, err = rv.missing(ctx, claims.Verbs, map[string]string{"group": claims.Group, "resource": claims.Resource})
	for _, s := range []struct {
		verbs []string
		attrs map[string]string
	}{
		{[]string{"list"}, map[string]string{"resource": "nodes"}},
		{claims.LeaseVerbs, map[string]string{"group": "coordination.k8s.io", "resource": "leases", "namespace": claims.LeaseNamespace, "name": claims.LeaseName(cfg.Network)}},
	} {
		var verbs []string
		if err == nil {
			verbs, err = rv.missing(ctx, s.verbs, s.attrs)
		}
		for _, v := range verbs {
			out.MissingSweep = append(out.MissingSweep, v+" "+s.attrs["resource"])
		}
	}
	if err != nil {
		out.Error = err.Error()
		return out
	}
	var lease struct{}
	if err := kube.Get(ctx, claims.LeasePath(cfg.Network), &lease); errors.Is(err, kubeapi.ErrNotFound) {
		out.NoLease = claims.LeaseNamespace + "/" + claims.LeaseName(cfg.Network)
	}
	out.On = !out.Unserved && len(out.Missing) == 0
	return out
}

// fine says the claims are on and the sweep may run: nothing to warn of.
func (c *ClaimsReport) fine() bool {
	return c.On && c.Error == "" && len(c.MissingSweep) == 0 && c.NoLease == ""
}

// reviewer asks what Calico's CNI identity may do: one
// SelfSubjectRulesReview per namespace (which every identity may create)
// answers for every verb, where a SelfSubjectAccessReview answers for
// one. The watch asks on every node, so requests count (docs/performance.md).
type reviewer struct {
	kube *kubeapi.Client
	// rules are the rules found per namespace; clusterScope's are the
	// cluster-wide bindings' alone (no RoleBinding lives there).
	rules map[string]*rulesReview
}

// clusterScope is a namespace no object lives in: the rules reviewed in
// it are the ClusterRoleBindings', which alone grant cluster-scoped
// resources (AddressClaims, Nodes).
const clusterScope = "safe-ipam-cluster-scope"

type rulesReview struct {
	Status struct {
		ResourceRules []struct {
			Verbs         []string `json:"verbs"`
			APIGroups     []string `json:"apiGroups"`
			Resources     []string `json:"resources"`
			ResourceNames []string `json:"resourceNames"`
		} `json:"resourceRules"`
		Incomplete      bool   `json:"incomplete"`
		EvaluationError string `json:"evaluationError"`
	} `json:"status"`
}

// allows says whether the rules grant verb on attrs' resource (one of
// them, when attrs names one).
func (r *rulesReview) allows(verb string, attrs map[string]string) bool {
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, rule := range r.Status.ResourceRules {
		if has(rule.Verbs, verb) && has(rule.APIGroups, attrs["group"]) && has(rule.Resources, attrs["resource"]) &&
			(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, attrs["name"]) && attrs["name"] != "") {
			return true
		}
	}
	return false
}

// missing are the verbs this identity may not do on the resource attrs
// name: as the rules of its namespace (or of cluster scope) say, or,
// where they are incomplete (an authorizer that cannot list them), as a
// SelfSubjectAccessReview per verb answers.
func (rv *reviewer) missing(ctx context.Context, verbs []string, attrs map[string]string) ([]string, error) {
	ns := attrs["namespace"]
	if ns == "" {
		ns = clusterScope
	}
	r, err := rv.review(ctx, ns)
	if err != nil {
		return nil, err
	}
	if r.Status.Incomplete || r.Status.EvaluationError != "" {
		return missing(ctx, rv.kube, verbs, attrs)
	}
	var out []string
	for _, verb := range verbs {
		if !r.allows(verb, attrs) {
			out = append(out, verb)
		}
	}
	return out, nil
}

func (rv *reviewer) review(ctx context.Context, ns string) (*rulesReview, error) {
	if r, ok := rv.rules[ns]; ok {
		return r, nil
	}
	review := map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": map[string]any{"namespace": ns}}
	r := &rulesReview{}
	if err := rv.kube.Create(ctx, "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", review, r); err != nil {
		return nil, fmt.Errorf("asking what Calico's CNI identity may do: %w", err)
	}
	if rv.rules == nil {
		rv.rules = map[string]*rulesReview{}
	}
	rv.rules[ns] = r
	return r, nil
}

// missing are the verbs this identity may not do on the resource attrs
// name, as SelfSubjectAccessReviews (which every identity may create)
// answer.
func missing(ctx context.Context, kube *kubeapi.Client, verbs []string, attrs map[string]string) ([]string, error) {
	var out []string
	for _, verb := range verbs {
		ra := map[string]string{"verb": verb}
		for k, v := range attrs {
			ra[k] = v
		}
		review := map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
			"spec": map[string]any{"resourceAttributes": ra}}
		var answer struct {
			Status struct {
				Allowed bool `json:"allowed"`
			} `json:"status"`
		}
		if err := kube.Create(ctx, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review, &answer); err != nil {
			return nil, fmt.Errorf("asking whether Calico's CNI identity may %s %s: %w", verb, attrs["resource"], err)
		}
		if !answer.Status.Allowed {
			out = append(out, verb)
		}
	}
	return out, nil
}

// writeText says whether network's records are claimed, and if not, what
// is missing and where it is granted.
func (c *ClaimsReport) writeText(w io.Writer, network string) {
	const off = "warning: no cluster-wide claims for %s, so this node fences its own records only: %s\n"
	switch {
	case c.Error != "":
		fmt.Fprintf(w, off, network, "they cannot be checked: "+c.Error)
	case c.Unserved:
		fmt.Fprintf(w, off, network, "the API server serves no AddressClaims (apply deploy/safe-ipam-claims.yaml)")
	case len(c.Missing) > 0:
		fmt.Fprintf(w, off, network, fmt.Sprintf("the identity of %s may not %s AddressClaims (deploy/safe-ipam-claims.yaml binds the role safe-ipam-claims to calico-cni-plugin and calico-node; bind it to this identity)",
			c.Kubeconfig, strings.Join(c.Missing, ", ")))
	default:
		fmt.Fprintf(w, "cluster-wide claims of %s: on (AddressClaims, as the identity of %s)\n", network, c.Kubeconfig)
	}
	if c.On && c.NoLease != "" {
		fmt.Fprintf(w, "warning: no node sweeps the claims of dead nodes of %s, which fence their addresses until deleted by hand: the Lease %s does not exist (deploy/safe-ipam-claims.yaml creates it for k8s-pod-network; create it for this network, and name it in the Role safe-ipam-claims-sweep)\n", network, c.NoLease)
	}
	if c.On && len(c.MissingSweep) > 0 {
		fmt.Fprintf(w, "warning: no node sweeps the claims of dead nodes of %s, which fence their addresses until deleted by hand: the identity of %s may not %s (deploy/safe-ipam-claims.yaml grants them: the ClusterRole safe-ipam-claims, and the Role safe-ipam-claims-sweep for the Lease %s/%s, which it creates for k8s-pod-network; bind them to this identity)\n",
			network, c.Kubeconfig, strings.Join(c.MissingSweep, ", "), claims.LeaseNamespace, claims.LeaseName(network))
	}
}
