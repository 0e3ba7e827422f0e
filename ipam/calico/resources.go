package calico

import (
	"fmt"
	"net/netip"
	"slices"
)

// Resource identity shared by IPPool and Node.
const (
	APIVersion = "projectcalico.org/v3"
	KindIPPool = "IPPool"
	KindNode   = "Node"
)

// Default block sizes when an IPPool leaves blockSize unset.
const (
	DefaultBlockSizeV4 = 26
	DefaultBlockSizeV6 = 122
)

// ObjectMeta is the part of a resource's metadata IPAM needs.
type ObjectMeta struct {
	Name              string `json:"name"`
	UID               string `json:"uid,omitempty"`
	CreationTimestamp string `json:"creationTimestamp,omitempty"`
}

// IPPool is a Calico IPPool resource, stored under IPPoolKey(name).
type IPPool struct {
	Kind       string     `json:"kind"`
	APIVersion string     `json:"apiVersion"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       IPPoolSpec `json:"spec"`
}

// IPPoolSpec holds the pool settings IPAM and the BRIEF's clusters use.
type IPPoolSpec struct {
	CIDR         string   `json:"cidr"`
	IPIPMode     string   `json:"ipipMode,omitempty"`
	VXLANMode    string   `json:"vxlanMode,omitempty"`
	NATOutgoing  bool     `json:"natOutgoing,omitempty"`
	BlockSize    int      `json:"blockSize,omitempty"`
	NodeSelector string   `json:"nodeSelector,omitempty"`
	AllowedUses  []string `json:"allowedUses,omitempty"`
	Disabled     bool     `json:"disabled,omitempty"`
}

// NewIPPool returns a pool with the settings of a default Calico install:
// no encapsulation, NAT outgoing, all nodes, workloads and tunnels.
func NewIPPool(name string, cidr netip.Prefix, blockSize int) IPPool {
	return IPPool{
		Kind:       KindIPPool,
		APIVersion: APIVersion,
		Metadata:   ObjectMeta{Name: name},
		Spec: IPPoolSpec{
			CIDR:         cidr.String(),
			IPIPMode:     "Never",
			VXLANMode:    "Never",
			NATOutgoing:  true,
			BlockSize:    blockSize,
			NodeSelector: "all()",
			AllowedUses:  []string{"Workload", "Tunnel"},
		},
	}
}

// Prefix parses the pool's CIDR.
func (p *IPPool) Prefix() (netip.Prefix, error) {
	cidr, err := netip.ParsePrefix(p.Spec.CIDR)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("pool %s: %w", p.Metadata.Name, err)
	}
	return cidr.Masked(), nil
}

// EffectiveBlockSize is the prefix length of the pool's blocks.
func (p *IPPool) EffectiveBlockSize() (int, error) {
	cidr, err := p.Prefix()
	if err != nil {
		return 0, err
	}
	size := p.Spec.BlockSize
	if size == 0 {
		size = DefaultBlockSizeV4
		if FamilyOf(cidr.Addr()) == IPv6 {
			size = DefaultBlockSizeV6
		}
	}
	if size < cidr.Bits() || size > cidr.Addr().BitLen() {
		return 0, fmt.Errorf("pool %s: block size %d does not fit %s", p.Metadata.Name, size, cidr)
	}
	return size, nil
}

// AllowsWorkloads reports whether pods may get addresses from the pool.
// An empty allowedUses means the default, which includes workloads.
func (p *IPPool) AllowsWorkloads() bool {
	return len(p.Spec.AllowedUses) == 0 || slices.Contains(p.Spec.AllowedUses, "Workload")
}

// Node is a Calico Node resource, stored under NodeKey(name). IPAM only
// needs it to exist.
type Node struct {
	Kind       string     `json:"kind"`
	APIVersion string     `json:"apiVersion"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       NodeSpec   `json:"spec"`
}

// NodeSpec is empty: IPAM reads no node settings.
type NodeSpec struct{}

// NewNode returns a Node resource called name.
func NewNode(name string) Node {
	return Node{Kind: KindNode, APIVersion: APIVersion, Metadata: ObjectMeta{Name: name}}
}
