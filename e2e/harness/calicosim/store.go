package calicosim

import (
	"context"
	"net/netip"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// store is where Calico's IPAM data lives: etcd (etcdStore) or the
// Kubernetes API (kubeStore). The Allocator decides what to allocate and
// release with the model of ipam/calico; a store reads and writes it the
// way calico-ipam does on that datastore. A write that lost a race with
// another writer returns errConflict, and the Allocator starts over.
type store interface {
	// checkNode fails, with calico-ipam's text, unless node (and, where
	// the datastore has them, the namespace of the pod) exist.
	checkNode(ctx context.Context, node, namespace string) error
	// ipPools lists the IPPool resources, ordered by name.
	ipPools(ctx context.Context) ([]calico.IPPool, error)
	// affineBlocks lists the blocks node holds confirmed, ascending.
	affineBlocks(ctx context.Context, node string, fam calico.Family) ([]netip.Prefix, error)
	// blocks lists every block of the family, whoever holds it.
	blocks(ctx context.Context, fam calico.Family) ([]netip.Prefix, error)
	// readBlock returns the block cidr, nil when it does not exist.
	readBlock(ctx context.Context, cidr netip.Prefix) (*blockRef, error)
	// claim creates blk, already claimed for node, with node's
	// confirmed affinity to it.
	claim(ctx context.Context, node string, blk *calico.Block) (*blockRef, error)
	// commitAllocation writes ref.block, changed since it was read by an
	// allocation for handle, and counts the address in the handle.
	commitAllocation(ctx context.Context, ref *blockRef, handle string) error
	// readHandle returns the handle; its handle is nil when it does not
	// exist.
	readHandle(ctx context.Context, handle string) (*handleRef, error)
	// commitRelease writes the changed blocks, then applies update to
	// the handle h (nil: absent), deleting it once it holds nothing.
	commitRelease(ctx context.Context, h *handleRef, changed []*blockRef, update func(*calico.Handle)) error
}

// blockRef is a block with the version it was read at.
type blockRef struct {
	block *calico.Block
	rev   int64       // etcd mod revision; 0 for absent
	obj   *kubeObject // the object as read from the apiserver
}

// handleRef is a handle with the version it was read at.
type handleRef struct {
	id     string
	handle *calico.Handle
	rev    int64
	obj    *kubeObject
}
