package releaser

import (
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
)

// Attribute keys and values of Calico's allocations
// (libcalico-go/lib/backend/model/block.go).
const (
	attrNode      = "node"
	attrNamespace = "namespace"
	attrPod       = "pod"
	attrType      = "type"
	attrVMIName   = "vmi-name"
	// windowsReserved holds the addresses Windows nodes reserve in their
	// blocks; kube-controllers never collects them.
	windowsReserved = "windows-reserved-ipam-handle"
)

// tunnelTypes are the allocation types of a node's tunnel addresses.
var tunnelTypes = map[string]bool{
	"ipipTunnelAddress": true, "vxlanTunnelAddress": true, "vxlanV6TunnelAddress": true,
	"wireguardTunnelAddress": true, "wireguardV6TunnelAddress": true,
}

// allocation is one allocated address as kube-controllers tracks it
// (ipam_allocation.go): an allocation without a handle is not tracked.
type allocation struct {
	ip     netip.Addr
	block  netip.Prefix
	handle string
	attrs  map[string]string
	seq    uint64
}

// id tells a re-allocation of the same address and handle apart: a new
// sequence number makes the allocation valid again, as in onBlockUpdated.
func (a allocation) id() string {
	return a.handle + "/" + a.ip.String() + "/" + strconv.FormatUint(a.seq, 10)
}

func (a allocation) node() string   { return a.attrs[attrNode] }
func (a allocation) isPod() bool    { return a.attrs[attrNamespace] != "" && a.attrs[attrPod] != "" }
func (a allocation) isTunnel() bool { return tunnelTypes[a.attrs[attrType]] }
func (a allocation) isVM() bool {
	_, ok := a.attrs[attrVMIName]
	return ok
}

// calicoNode is a Calico Node as kube-controllers reads it: its
// Kubernetes node name from spec.orchRefs (orchestrator "k8s"), "" when
// it has none, which makes it a non-Kubernetes node that is left alone.
type calicoNode struct {
	k8sName string
}

// world is one round's reading of the cluster and of Calico's data.
type world struct {
	k8sNodes    map[string]bool
	pods        map[string]*corev1.Pod // by namespace/name
	calicoNodes map[string]calicoNode
	allocs      []allocation
	// affine maps each block with a host affinity to its node; empty
	// lists those of them with no allocated address.
	affine map[netip.Prefix]string
	empty  map[netip.Prefix]bool
}

// addIPAM records the blocks of snap.
func (w *world) addIPAM(snap *calicosim.Snapshot) {
	w.affine, w.empty = map[netip.Prefix]string{}, map[netip.Prefix]bool{}
	for _, bs := range snap.Blocks {
		b := bs.Block
		if node, ok := b.AffinityNode(); ok {
			w.affine[b.CIDR] = node
			w.empty[b.CIDR] = len(bs.Allocated) == 0
		}
		for _, al := range bs.Allocated {
			if al.Handle == "" {
				continue
			}
			w.allocs = append(w.allocs, allocation{ip: al.IP, block: al.Block, handle: al.Handle, attrs: al.Secondary,
				seq: b.SequenceNumberForAllocation[strconv.Itoa(al.Ordinal)]})
		}
	}
}

// k8sNodeOf is kubernetesNodeForCalico: the Kubernetes node of Calico
// node cnode, "" when Calico's Node is gone; ok is false for a Calico Node
// that is not a Kubernetes node.
func (w *world) k8sNodeOf(cnode string) (name string, ok bool) {
	n, known := w.calicoNodes[cnode]
	if !known {
		return "", true
	}
	return n.k8sName, n.k8sName != ""
}

// blocksOf counts the blocks affine to node.
func (w *world) blocksOf(node string) int {
	n := 0
	for _, owner := range w.affine {
		if owner == node {
			n++
		}
	}
	return n
}
