package calicosim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/etcdread"
)

// NodeMissingError is calico-ipam's failure when the Node resource of the
// configured nodename is absent. Its text matches Calico's.
type NodeMissingError struct{ Node string }

func (e *NodeMissingError) Error() string {
	return fmt.Sprintf("resource does not exist: Node(%s)", e.Node)
}

// CheckNode fails with *NodeMissingError unless the Node resource exists.
func CheckNode(ctx context.Context, cli *clientv3.Client, name string) error {
	var n calico.Node
	rev, err := etcdread.ReadJSON(ctx, cli, calico.NodeKey(name), &n)
	if err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	if rev == 0 {
		return &NodeMissingError{Node: name}
	}
	return nil
}

// ReadIPPools returns every IPPool resource, ordered by name.
func ReadIPPools(ctx context.Context, cli *clientv3.Client) ([]calico.IPPool, error) {
	resp, err := cli.Get(ctx, calico.IPPoolPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("listing IP pools: %w", err)
	}
	pools := make([]calico.IPPool, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p calico.IPPool
		if err := json.Unmarshal(kv.Value, &p); err != nil {
			return nil, fmt.Errorf("decoding IP pool %s: %w", kv.Key, err)
		}
		pools = append(pools, p)
	}
	return pools, nil
}

// ErrNoPool means no IP pool fits the request.
var ErrNoPool = errors.New("no usable IP pool")

// SelectPools picks the pools of one family to allocate from: those named
// in wanted (by name or CIDR), in that order, or by default every enabled
// workload pool of the family, by name.
func SelectPools(all []calico.IPPool, wanted []string, fam calico.Family) ([]calico.IPPool, error) {
	if len(wanted) == 0 {
		return defaultPools(all, fam)
	}
	var out []calico.IPPool
	for _, w := range wanted {
		p, err := findPool(all, w)
		if err != nil {
			return nil, err
		}
		cidr, err := p.Prefix()
		if err != nil {
			return nil, err
		}
		if calico.FamilyOf(cidr.Addr()) != fam {
			return nil, fmt.Errorf("pool %q is not an %s pool: %w", w, fam, ErrNoPool)
		}
		if p.Spec.Disabled {
			return nil, fmt.Errorf("pool %q is disabled: %w", w, ErrNoPool)
		}
		out = append(out, p)
	}
	return out, nil
}

func defaultPools(all []calico.IPPool, fam calico.Family) ([]calico.IPPool, error) {
	var out []calico.IPPool
	for _, p := range all {
		cidr, err := p.Prefix()
		if err != nil || calico.FamilyOf(cidr.Addr()) != fam || p.Spec.Disabled || !p.AllowsWorkloads() {
			continue
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no enabled %s IP pools: %w", fam, ErrNoPool)
	}
	return out, nil
}

// findPool matches a configured pool by name or by CIDR.
func findPool(all []calico.IPPool, want string) (calico.IPPool, error) {
	wantCIDR, cidrErr := netip.ParsePrefix(strings.TrimSpace(want))
	i := slices.IndexFunc(all, func(p calico.IPPool) bool {
		if p.Metadata.Name == want {
			return true
		}
		cidr, err := p.Prefix()
		return cidrErr == nil && err == nil && cidr == wantCIDR.Masked()
	})
	if i < 0 {
		return calico.IPPool{}, fmt.Errorf("configured pool %q does not exist: %w", want, ErrNoPool)
	}
	return all[i], nil
}

func poolCIDRs(pools []calico.IPPool) []string {
	out := make([]string, len(pools))
	for i, p := range pools {
		out[i] = p.Spec.CIDR
	}
	return out
}
