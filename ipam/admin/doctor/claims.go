package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// ClaimsReport says whether a network's records get their cluster-wide
// claims: the API server serves AddressClaims, and the identity of
// Calico's CNI kubeconfig (which the CNI binary and gc use) may do each
// of claims.Verbs, as SelfSubjectAccessReviews answer. Without them the
// node fences its own records only: a warning, not a problem.
type ClaimsReport struct {
	On bool `json:"on"`
	// Kubeconfig is Calico's CNI kubeconfig, whose identity is checked.
	Kubeconfig string `json:"kubeconfig"`
	// Unserved: the API server serves no AddressClaims.
	Unserved bool `json:"unserved,omitempty"`
	// Missing are the verbs the identity may not do.
	Missing []string `json:"missing,omitempty"`
	Error   string   `json:"error,omitempty"`
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
	for _, verb := range claims.Verbs {
		allowed, err := mayDo(ctx, kube, verb)
		if err != nil {
			out.Error = err.Error()
			return out
		}
		if !allowed {
			out.Missing = append(out.Missing, verb)
		}
	}
	out.On = !out.Unserved && len(out.Missing) == 0
	return out
}

// mayDo asks the API server whether this identity may do verb on
// AddressClaims (a SelfSubjectAccessReview, which every identity may
// create).
func mayDo(ctx context.Context, kube *kubeapi.Client, verb string) (bool, error) {
	review := map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
		"spec": map[string]any{"resourceAttributes": map[string]string{"group": claims.Group, "resource": claims.Resource, "verb": verb}}}
	var answer struct {
		Status struct {
			Allowed bool `json:"allowed"`
		} `json:"status"`
	}
	if err := kube.Create(ctx, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review, &answer); err != nil {
		return false, fmt.Errorf("asking whether Calico's CNI identity may %s AddressClaims: %w", verb, err)
	}
	return answer.Status.Allowed, nil
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
}
