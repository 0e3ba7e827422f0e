package releaser

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

// datastoreRetries is how often Calico's IPAM client re-reads and retries
// a write that lost a race (libcalico-go/lib/ipam).
const datastoreRetries = 100

// errConflict: an object changed since it was read.
var errConflict = datastore.ErrConflict

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

// affinityRef is a host's affinity for a block as read.
type affinityRef struct {
	node     string
	cidr     netip.Prefix
	affinity calico.Affinity
	version  datastore.Version
	// obj is the BlockAffinity object (Kubernetes datastore).
	obj *unstructured.Unstructured
}

// calicoStore is Calico's datastore as kube-controllers' calls change it.
// Blocks and handles are read and rewritten through ipam/calico/datastore,
// each write guarded by the version read; deletes, affinities and Nodes
// are the datastore's own.
type calicoStore interface {
	datastore.Datastore
	// calicoNodes reads Calico's Nodes (KDD: the Kubernetes Nodes).
	calicoNodes(ctx context.Context, k8sNodes map[string]bool) (map[string]calicoNode, error)
	snapshot(ctx context.Context) (*calicosim.Snapshot, error)
	// deleteBlock deletes b if it is still at its version.
	deleteBlock(ctx context.Context, b *datastore.Block) error
	// affinities lists the blocks node has an affinity for, IPv4 first.
	affinities(ctx context.Context, node string) ([]netip.Prefix, error)
	// affinity reads node's affinity for cidr; nil when absent.
	affinity(ctx context.Context, node string, cidr netip.Prefix) (*affinityRef, error)
	// putAffinity rewrites a (guarded), and takes its new version.
	putAffinity(ctx context.Context, a *affinityRef) error
	deleteAffinity(ctx context.Context, a *affinityRef) error
	// deleteNode is the node deleter's Nodes().Delete (etcd only).
	deleteNode(ctx context.Context, name string, log *slog.Logger) error
}

func openStore(opt Options, cfg *rest.Config) (calicoStore, error) {
	if opt.Datastore == Kubernetes {
		return newKubeStore(cfg)
	}
	return newEtcdStore(opt.EtcdEndpoints)
}
