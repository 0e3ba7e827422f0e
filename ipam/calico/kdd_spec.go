package calico

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strconv"
	"time"
)

// IPAMBlockSpec is the spec of an IPAMBlock. It holds what the etcd Block
// holds, with KDD's JSON names: affinityClaimTime instead of
// affinity_claim_time, and the deprecated strictAffinity that Calico
// always writes (false).
type IPAMBlockSpec struct {
	CIDR                        string            `json:"cidr"`
	Affinity                    *string           `json:"affinity,omitempty"`
	AffinityClaimTime           *time.Time        `json:"affinityClaimTime,omitempty"`
	Allocations                 []*int            `json:"allocations"`
	Unallocated                 []int             `json:"unallocated"`
	Attributes                  []KDDAttribute    `json:"attributes"`
	SequenceNumber              uint64            `json:"sequenceNumber"`
	SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation"`
	Deleted                     bool              `json:"deleted"`
	StrictAffinity              bool              `json:"strictAffinity"`
}

// KDDAttribute is a block attribute as KDD stores it: both fields are left
// out when empty, where etcd writes null.
type KDDAttribute struct {
	HandleID  *string           `json:"handle_id,omitempty"`
	Secondary map[string]string `json:"secondary,omitempty"`
	// extra is Attribute's extra: the keys this type does not model.
	extra map[string]json.RawMessage
}

// kddAttributeFields is KDDAttribute's known keys, without its methods.
type kddAttributeFields struct {
	HandleID  *string           `json:"handle_id,omitempty"`
	Secondary map[string]string `json:"secondary,omitempty"`
}

// MarshalJSON writes the known keys as before, then the unknown keys read
// with the attribute, in sorted order.
func (a KDDAttribute) MarshalJSON() ([]byte, error) {
	return encodeAttribute(kddAttributeFields{HandleID: a.HandleID, Secondary: a.Secondary}, a.extra)
}

// UnmarshalJSON reads the known keys as encoding/json does and keeps
// every other key for MarshalJSON.
func (a *KDDAttribute) UnmarshalJSON(data []byte) error {
	return decodeAttribute(data, &a.HandleID, &a.Secondary, &a.extra)
}

// NewIPAMBlockSpec returns the spec that stores b.
func NewIPAMBlockSpec(b *Block) IPAMBlockSpec {
	s := IPAMBlockSpec{
		CIDR:                        b.CIDR.String(),
		Affinity:                    b.Affinity,
		AffinityClaimTime:           b.AffinityClaimTime,
		Allocations:                 b.Allocations,
		Unallocated:                 b.Unallocated,
		Attributes:                  make([]KDDAttribute, len(b.Attributes)),
		SequenceNumber:              b.SequenceNumber,
		SequenceNumberForAllocation: b.SequenceNumberForAllocation,
		Deleted:                     b.Deleted,
	}
	for i, a := range b.Attributes {
		s.Attributes[i] = KDDAttribute{HandleID: a.HandleID, Secondary: a.Secondary, extra: a.extra}
	}
	return s
}

// Block returns the etcd model of the spec. The spec's slices and maps are
// shared, not copied.
func (s *IPAMBlockSpec) Block() (*Block, error) {
	cidr, err := netip.ParsePrefix(s.CIDR)
	if err != nil {
		return nil, fmt.Errorf("IPAMBlock spec: %w", err)
	}
	b := &Block{
		CIDR:                        cidr,
		Affinity:                    s.Affinity,
		AffinityClaimTime:           s.AffinityClaimTime,
		Allocations:                 s.Allocations,
		Unallocated:                 s.Unallocated,
		Attributes:                  make([]Attribute, len(s.Attributes)),
		SequenceNumber:              s.SequenceNumber,
		SequenceNumberForAllocation: s.SequenceNumberForAllocation,
		Deleted:                     s.Deleted,
	}
	for i, a := range s.Attributes {
		b.Attributes[i] = Attribute{HandleID: a.HandleID, Secondary: a.Secondary, extra: a.extra}
	}
	return b, nil
}

// IPAMHandleSpec is the spec of an IPAMHandle. Unlike etcd, where the
// handle ID is only in the key, it keeps the ID in its original case.
type IPAMHandleSpec struct {
	HandleID string         `json:"handleID"`
	Block    map[string]int `json:"block"`
	Deleted  bool           `json:"deleted"`
}

// NewIPAMHandleSpec returns the spec that stores h under handleID.
func NewIPAMHandleSpec(handleID string, h *Handle) IPAMHandleSpec {
	return IPAMHandleSpec{HandleID: handleID, Block: maps.Clone(h.Block), Deleted: h.Deleted}
}

// Handle returns the etcd model of the spec.
func (s *IPAMHandleSpec) Handle() *Handle {
	h := &Handle{Block: maps.Clone(s.Block), Deleted: s.Deleted}
	if h.Block == nil {
		h.Block = map[string]int{}
	}
	return h
}

// BlockAffinitySpec is the spec of a BlockAffinity. Node and CIDR, in the
// etcd key there, are fields here, and Deleted is a string, "true" or
// "false", for compatibility with older Calico releases.
type BlockAffinitySpec struct {
	State   AffinityState `json:"state"`
	Node    string        `json:"node"`
	CIDR    string        `json:"cidr"`
	Type    string        `json:"type,omitempty"`
	Deleted string        `json:"deleted"`
}

// NewBlockAffinitySpec returns the spec of node's claim a on cidr.
func NewBlockAffinitySpec(node string, cidr netip.Prefix, a Affinity) BlockAffinitySpec {
	return BlockAffinitySpec{
		State:   a.State,
		Node:    node,
		CIDR:    cidr.Masked().String(),
		Type:    AffinityTypeHost,
		Deleted: strconv.FormatBool(a.Deleted),
	}
}

// Affinity returns the etcd model of the spec with the node and block it
// is keyed by there. An empty deleted reads as false.
func (s *BlockAffinitySpec) Affinity() (node string, cidr netip.Prefix, a Affinity, err error) {
	cidr, err = netip.ParsePrefix(s.CIDR)
	if err != nil {
		return "", netip.Prefix{}, Affinity{}, fmt.Errorf("BlockAffinity spec: %w", err)
	}
	deleted := false
	if s.Deleted != "" {
		if deleted, err = strconv.ParseBool(s.Deleted); err != nil {
			return "", netip.Prefix{}, Affinity{}, fmt.Errorf("BlockAffinity spec: deleted %q: %w", s.Deleted, err)
		}
	}
	return s.Node, cidr, Affinity{State: s.State, Deleted: deleted}, nil
}

// MarshalSpecKeeping encodes spec like json.Marshal, and keeps any key of
// raw (the spec as read from the apiserver) that the spec type does not
// model, so that rewriting an object another Calico version wrote never
// drops its fields. It is MarshalKeeping for KDD specs.
func MarshalSpecKeeping(raw []byte, spec any) ([]byte, error) {
	out, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return keepUnknownKeys(raw, out), nil
}

// KDDGetter GETs a Kubernetes API path into v; a missing object is an
// error wrapping notFound.
type KDDGetter func(ctx context.Context, path string, v any) error

// KDDAllocationAttribute is AllocationAttribute on Calico's Kubernetes
// datastore, trying the IPAMBlock of each block size Calico allows, the
// default first (one GET, as clusters run).
func KDDAllocationAttribute(ctx context.Context, get KDDGetter, notFound error, ip netip.Addr) (Attribute, bool, error) {
	for _, p := range BlockCandidates(ip) {
		var obj struct {
			Spec IPAMBlockSpec `json:"spec"`
		}
		err := get(ctx, "/apis/"+KDDAPIVersion+"/"+PluralIPAMBlocks+"/"+BlockName(p), &obj)
		if errors.Is(err, notFound) {
			continue
		}
		if err != nil {
			return Attribute{}, false, err
		}
		b, err := obj.Spec.Block()
		if err != nil {
			return Attribute{}, false, err
		}
		return b.AttributeOf(ip)
	}
	return Attribute{}, false, nil
}
