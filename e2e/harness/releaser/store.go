package releaser

import (
	"context"
	"errors"
	"net/netip"

	"k8s.io/client-go/rest"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
)

// datastoreRetries is how often Calico's IPAM client re-reads and retries
// a write that lost a race (libcalico-go/lib/ipam).
const datastoreRetries = 100

// errConflict: an object changed since it was read.
var errConflict = errors.New("changed since it was read")

// errNotEmpty: a block still holds addresses, so its affinity stays.
var errNotEmpty = errors.New("block is not empty")

// releaseOpt is one address to release (Calico's ReleaseOptions): handle
// and seq, when set, must still match the allocation.
type releaseOpt struct {
	ip     netip.Addr
	block  netip.Prefix
	handle string
	seq    *uint64
}

// calicoStore is Calico's datastore as kube-controllers' calls change it.
type calicoStore interface {
	// calicoNodes reads Calico's Nodes (KDD: the Kubernetes Nodes).
	calicoNodes(ctx context.Context, k8sNodes map[string]bool) (map[string]calicoNode, error)
	snapshot(ctx context.Context) (*calicosim.Snapshot, error)
	// releaseIPs is ReleaseIPs: per block, the block is rewritten (or
	// deleted when it ends up empty and affine to no node), then each
	// handle's count goes down (the handle is deleted at zero).
	releaseIPs(ctx context.Context, opts []releaseOpt) error
	// releaseHostAffinities is ReleaseHostAffinities: every block affine
	// to node, IPv4 then IPv6, as releaseBlockAffinity.
	releaseHostAffinities(ctx context.Context, node string, mustBeEmpty bool) error
	// releaseBlockAffinity marks the affinity pendingDeletion, deletes
	// the block when empty or else drops its affinity, then deletes the
	// affinity; with mustBeEmpty a block in use is errNotEmpty.
	releaseBlockAffinity(ctx context.Context, node string, cidr netip.Prefix, mustBeEmpty bool) error
	// deleteNode is the etcd node deleter's Nodes().Delete.
	deleteNode(ctx context.Context, name string) error
	close() error
}

func openStore(opt Options, cfg *rest.Config) (calicoStore, error) {
	if opt.Datastore == Kubernetes {
		return newKubeStore(cfg)
	}
	return newEtcdStore(opt.EtcdEndpoints)
}
