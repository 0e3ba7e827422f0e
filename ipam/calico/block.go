package calico

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/safe-ipam/safe-ipam/ipam/jsonscan"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Block is an IPAM allocation block, stored under BlockKey(CIDR).
type Block struct {
	CIDR netip.Prefix `json:"cidr"`
	// Affinity is "host:<node>" for a block claimed by a node, null if not.
	Affinity          *string    `json:"affinity"`
	AffinityClaimTime *time.Time `json:"affinity_claim_time,omitempty"`
	// Allocations holds, per ordinal, an index into Attributes, or nil
	// when the address is free.
	Allocations []*int `json:"allocations"`
	// Unallocated is the free list in the order addresses are handed out.
	Unallocated []int       `json:"unallocated"`
	Attributes  []Attribute `json:"attributes"`
	// SequenceNumber counts every change to the block's allocations.
	SequenceNumber uint64 `json:"sequenceNumber"`
	// SequenceNumberForAllocation records, per allocated ordinal (decimal),
	// the SequenceNumber at the moment it was allocated.
	SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation"`
	Deleted                     bool              `json:"deleted"`
}

// Attribute says who holds an address: the handle and free-form details
// such as namespace, pod, node and timestamp.
type Attribute struct {
	HandleID  *string           `json:"handle_id"`
	Secondary map[string]string `json:"secondary"`
	// extra holds the attribute's keys this type does not model, such as
	// Calico's releasedAt (IP cooldown) and alternateOwnerAttrs, as read.
	// They travel with the attribute when released attributes are dropped
	// and the rest renumbered, and are written back after the known keys.
	extra map[string]json.RawMessage
}

// attributeFields is Attribute's known keys, encoded as encoding/json
// would encode them (no methods, so no recursion).
type attributeFields struct {
	HandleID  *string           `json:"handle_id"`
	Secondary map[string]string `json:"secondary"`
}

// MarshalJSON writes handle_id and secondary as before (null when empty,
// as etcd holds them), then the unknown keys read with the attribute, in
// sorted order.
func (a Attribute) MarshalJSON() ([]byte, error) {
	return encodeAttribute(attributeFields{HandleID: a.HandleID, Secondary: a.Secondary}, a.extra)
}

// encodeAttribute is MarshalJSON of Attribute and KDDAttribute: fields,
// the known keys, then extra.
func encodeAttribute(fields any, extra map[string]json.RawMessage) ([]byte, error) {
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return appendMembers(out, extra), nil
}

// UnmarshalJSON reads the known keys as encoding/json does and keeps
// every other key for MarshalJSON.
func (a *Attribute) UnmarshalJSON(data []byte) error {
	return decodeAttribute(data, &a.HandleID, &a.Secondary, &a.extra)
}

// decodeAttribute is UnmarshalJSON of Attribute and KDDAttribute: the known
// keys into handle and secondary, all others into extra. null changes
// nothing, as for any struct.
func decodeAttribute(data []byte, handle **string, secondary *map[string]string, extra *map[string]json.RawMessage) error {
	if string(data) == "null" {
		return nil
	}
	if decodeCommonAttribute(data, handle, secondary) {
		*extra = nil
		return nil
	}
	f := attributeFields{HandleID: *handle, Secondary: *secondary}
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	unknown, err := unknownMembers(data, "handle_id", "secondary")
	if err != nil {
		return err
	}
	*handle, *secondary, *extra = f.HandleID, f.Secondary, unknown
	return nil
}

// Handle returns the handle ID, "" when it is null.
func (a Attribute) Handle() string {
	if a.HandleID == nil {
		return ""
	}
	return *a.HandleID
}

// equal compares the unknown keys too, byte for byte as read. A new
// allocation has none, so it never shares an attribute that carries any:
// one with Calico's releasedAt belongs to an address in cooldown, and an
// allocation merged into it would look released, and inherit its
// alternateOwnerAttrs.
func (a Attribute) equal(o Attribute) bool {
	return a.Handle() == o.Handle() && (a.HandleID == nil) == (o.HandleID == nil) &&
		(a.Secondary == nil) == (o.Secondary == nil) && maps.Equal(a.Secondary, o.Secondary) &&
		maps.EqualFunc(a.extra, o.extra, func(x, y json.RawMessage) bool { return bytes.Equal(x, y) })
}

// ErrBlockFull means a block has fewer free addresses than asked for.
var ErrBlockFull = errors.New("block has no free addresses")

const hostAffinityPrefix = "host:"

// NewBlock returns an empty, unclaimed block for cidr whose sequence
// number starts at seq. Calico starts it from the clock so that a block
// that is deleted and recreated never reuses sequence numbers.
func NewBlock(cidr netip.Prefix, seq uint64) (*Block, error) {
	n, err := Ordinals(cidr)
	if err != nil {
		return nil, err
	}
	b := &Block{
		CIDR:                        cidr.Masked(),
		Allocations:                 make([]*int, n),
		Unallocated:                 make([]int, n),
		Attributes:                  []Attribute{},
		SequenceNumber:              seq,
		SequenceNumberForAllocation: map[string]uint64{},
	}
	for i := range b.Unallocated {
		b.Unallocated[i] = i
	}
	return b, nil
}

// ClaimFor makes node the block's owner. Calico stores the claim time in
// whole seconds, UTC.
func (b *Block) ClaimFor(node string, at time.Time) {
	aff := hostAffinityPrefix + node
	t := at.UTC().Truncate(time.Second)
	b.Affinity, b.AffinityClaimTime = &aff, &t
}

// AffinityNode returns the node the block is affine to.
func (b *Block) AffinityNode() (string, bool) {
	if b.Affinity == nil {
		return "", false
	}
	return strings.CutPrefix(*b.Affinity, hostAffinityPrefix)
}

// Size is the number of addresses in the block.
func (b *Block) Size() int { return len(b.Allocations) }

// FreeCount is the number of addresses that can still be allocated.
func (b *Block) FreeCount() int { return len(b.Unallocated) }

// IP returns the address of ordinal ord.
func (b *Block) IP(ord int) (netip.Addr, error) { return OrdinalToIP(b.CIDR, ord) }

// Ordinal returns the ordinal of ip in the block.
func (b *Block) Ordinal(ip netip.Addr) (int, error) { return IPToOrdinal(b.CIDR, ip) }

// HandleOf is the handle ip is allocated under, "" when it is free.
func (b *Block) HandleOf(ip netip.Addr) (string, error) {
	ord, err := b.Ordinal(ip.Unmap())
	if err != nil {
		return "", fmt.Errorf("block %s: %w", b.CIDR, err)
	}
	a, _ := b.Attribute(ord)
	return a.Handle(), nil
}

// AttributeOf is the attribute of ip's allocation, and whether ip is
// allocated.
func (b *Block) AttributeOf(ip netip.Addr) (Attribute, bool, error) {
	ord, err := b.Ordinal(ip.Unmap())
	if err != nil {
		return Attribute{}, false, fmt.Errorf("block %s: %w", b.CIDR, err)
	}
	a, ok := b.Attribute(ord)
	return a, ok, nil
}

// Attribute returns the attribute of an allocated ordinal.
func (b *Block) Attribute(ord int) (Attribute, bool) {
	if ord < 0 || ord >= len(b.Allocations) || b.Allocations[ord] == nil {
		return Attribute{}, false
	}
	i := *b.Allocations[ord]
	if i < 0 || i >= len(b.Attributes) {
		return Attribute{}, false
	}
	return b.Attributes[i], true
}

// Allocate takes n ordinals from the head of the free list for handle
// ("" for a null handle) with the given secondary attributes. It changes
// nothing and returns ErrBlockFull if fewer than n are free.
func (b *Block) Allocate(n int, handle string, secondary map[string]string) ([]int, error) {
	if n > len(b.Unallocated) {
		return nil, fmt.Errorf("allocating %d in %s with %d free: %w", n, b.CIDR, len(b.Unallocated), ErrBlockFull)
	}
	if b.SequenceNumberForAllocation == nil {
		b.SequenceNumberForAllocation = map[string]uint64{}
	}
	attr := b.attributeIndex(newAttribute(handle, secondary))
	ords := slices.Clone(b.Unallocated[:n])
	b.Unallocated = b.Unallocated[n:]
	for _, ord := range ords {
		b.Allocations[ord] = &attr
		b.SequenceNumberForAllocation[strconv.Itoa(ord)] = b.SequenceNumber
		b.SequenceNumber++
	}
	return ords, nil
}

func newAttribute(handle string, secondary map[string]string) Attribute {
	a := Attribute{Secondary: maps.Clone(secondary)}
	if handle != "" {
		a.HandleID = &handle
	}
	return a
}

// attributeIndex reuses an identical attribute so that repeated
// allocations for the same holder share one entry.
func (b *Block) attributeIndex(a Attribute) int {
	for i, have := range b.Attributes {
		if have.equal(a) {
			return i
		}
	}
	b.Attributes = append(b.Attributes, a)
	return len(b.Attributes) - 1
}

// Release frees the given ordinals. Each goes to the tail of the free
// list, so a freed address is reused only after the rest of the block.
// It changes nothing if any ordinal is not allocated.
func (b *Block) Release(ords ...int) error {
	seen := map[int]bool{}
	for _, ord := range ords {
		if ord < 0 || ord >= len(b.Allocations) || b.Allocations[ord] == nil || seen[ord] {
			return fmt.Errorf("releasing ordinal %d of %s: not allocated", ord, b.CIDR)
		}
		seen[ord] = true
	}
	for _, ord := range ords {
		b.Allocations[ord] = nil
		b.Unallocated = append(b.Unallocated, ord)
		delete(b.SequenceNumberForAllocation, strconv.Itoa(ord))
		b.SequenceNumber++
	}
	b.dropUnusedAttributes()
	return nil
}

// ReleaseHandle frees every ordinal held by handle, in ordinal order, and
// returns them.
func (b *Block) ReleaseHandle(handle string) []int {
	ords := b.OrdinalsOf(handle)
	if err := b.Release(ords...); err != nil {
		panic(err) // OrdinalsOf returns only allocated ordinals
	}
	return ords
}

// OrdinalsOf returns the ordinals held by handle, ascending.
func (b *Block) OrdinalsOf(handle string) []int {
	var ords []int
	for ord := range b.Allocations {
		if a, ok := b.Attribute(ord); ok && a.Handle() == handle {
			ords = append(ords, ord)
		}
	}
	return ords
}

// HandleCounts returns how many addresses each handle holds in the block.
func (b *Block) HandleCounts() map[string]int {
	counts := map[string]int{}
	for ord := range b.Allocations {
		if a, ok := b.Attribute(ord); ok {
			counts[a.Handle()]++
		}
	}
	return counts
}

// dropUnusedAttributes removes attributes no allocation refers to and
// renumbers the allocations, keeping the attributes' order.
func (b *Block) dropUnusedAttributes() {
	used := make([]bool, len(b.Attributes))
	for _, a := range b.Allocations {
		if a != nil && *a >= 0 && *a < len(used) {
			used[*a] = true
		}
	}
	newIndex := make([]int, len(b.Attributes))
	kept := b.Attributes[:0:0]
	for i, attr := range b.Attributes {
		newIndex[i] = len(kept)
		if used[i] {
			kept = append(kept, attr)
		}
	}
	b.Attributes = kept
	for ord, a := range b.Allocations {
		if a != nil && *a >= 0 && *a < len(newIndex) {
			i := newIndex[*a]
			b.Allocations[ord] = &i
		}
	}
}

// Held is one allocated address of a block.
type Held struct {
	Ordinal   int
	IP        netip.Addr
	Attribute Attribute
}

// Held lists the block's allocated addresses in ordinal order.
func (b *Block) Held() []Held {
	var out []Held
	for ord := range b.Allocations {
		attr, ok := b.Attribute(ord)
		if !ok {
			continue
		}
		if ip, err := b.IP(ord); err == nil {
			out = append(out, Held{Ordinal: ord, IP: ip, Attribute: attr})
		}
	}
	return out
}

// MarshalKeeping encodes b like json.Marshal, and keeps any key of raw (the
// block as it was read) that Block does not model, so that rewriting a
// block written by another Calico version never drops its fields. The
// unknown keys of each attribute are kept by Attribute itself.
func MarshalKeeping(raw []byte, b *Block) ([]byte, error) {
	out, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return keepUnknownKeys(raw, out), nil
}

// keepUnknownKeys appends to the JSON object out, in sorted order, every
// key of the JSON object raw that out lacks.
func keepUnknownKeys(raw, out []byte) []byte {
	var read, known map[string]json.RawMessage
	if json.Unmarshal(raw, &read) != nil || json.Unmarshal(out, &known) != nil {
		return out // nothing readable to keep
	}
	for k := range known {
		delete(read, k)
	}
	return appendMembers(out, read)
}

// appendMembers appends the members of extra, in sorted key order, to the
// JSON object out.
func appendMembers(out []byte, extra map[string]json.RawMessage) []byte {
	if len(extra) == 0 {
		return out
	}
	keys := slices.Sorted(maps.Keys(extra))
	buf := bytes.NewBuffer(out[: len(out)-1 : len(out)-1])
	for _, k := range keys {
		name, _ := json.Marshal(k)
		if buf.Len() > 1 { // not right after "{"
			buf.WriteByte(',')
		}
		buf.Write(name)
		buf.WriteByte(':')
		buf.Write(extra[k])
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// unknownMembers returns the members of the JSON object data whose keys
// are none of known, nil if there are none. A key that differs from a
// known one only in case is known: encoding/json decodes it into that
// field. null has no members.
func unknownMembers(data []byte, known ...string) (map[string]json.RawMessage, error) {
	if onlyKnownKeys(data, known) {
		return nil, nil
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return nil, err
	}
	maps.DeleteFunc(all, func(k string, _ json.RawMessage) bool {
		return slices.ContainsFunc(known, func(n string) bool { return strings.EqualFold(k, n) })
	})
	if len(all) == 0 {
		return nil, nil
	}
	return all, nil
}

// onlyKnownKeys says, without decoding, that the JSON object data has no
// key but known ones: nearly every attribute Calico writes. An audit
// decodes a million; decoding each into a map as well cost it seconds. A
// key it cannot judge so simply (escaped, not ASCII) or anything else it
// does not expect answers false, and unknownMembers decodes.
func onlyKnownKeys(data []byte, known []string) bool {
	i := jsonscan.Space(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = jsonscan.Space(data, i+1)
	if i < len(data) && data[i] == '}' {
		return jsonscan.Space(data, i+1) == len(data)
	}
	for i < len(data) && data[i] == '"' {
		end := i + 1
		for end < len(data) && data[end] != '"' && data[end] != '\\' && data[end] < 0x80 {
			end++
		}
		if end >= len(data) || data[end] != '"' {
			return false
		}
		key := string(data[i+1 : end])
		if !slices.ContainsFunc(known, func(n string) bool { return strings.EqualFold(key, n) }) {
			return false
		}
		i = jsonscan.Space(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		if i = skipValue(data, jsonscan.Space(data, i+1)); i < 0 {
			return false
		}
		i = jsonscan.Space(data, i)
		switch {
		case i < len(data) && data[i] == ',':
			i = jsonscan.Space(data, i+1)
		case i < len(data) && data[i] == '}':
			return jsonscan.Space(data, i+1) == len(data)
		default:
			return false
		}
	}
	return false
}

// skipValue is the index past the JSON value at i, -1 when there is none
// it can skip (unbalanced, or cut short). Only the nesting and strings
// matter: the caller decoded data already, so its values are valid.
func skipValue(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if i >= len(data) {
				return -1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth < 0 {
				return i // the end of the enclosing object
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
		if depth == 0 && (data[i] == '"' || data[i] == '}' || data[i] == ']') {
			return i + 1
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}
