package releaser

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// release frees opts' addresses in b as Calico's block release does: a
// sequence number or handle that no longer matches fails the whole block
// (the caller acted on stale data); an address already free is skipped.
// It returns the addresses freed per handle; none freed leaves b as it
// was. A rewrite bumps the block's sequence number once, as every block
// update does.
func release(b *calico.Block, opts []releaseOpt) (map[string]int, error) {
	counts := map[string]int{}
	var ords []int
	seen := map[int]bool{}
	for _, o := range opts {
		ord, err := b.Ordinal(o.ip)
		if err != nil {
			return nil, err
		}
		if seen[ord] {
			continue
		}
		seen[ord] = true
		if o.seq != nil && *o.seq != b.SequenceNumberForAllocation[strconv.Itoa(ord)] {
			return nil, fmt.Errorf("releasing %s: sequence number %d, stored %d: %w",
				o.ip, *o.seq, b.SequenceNumberForAllocation[strconv.Itoa(ord)], errConflict)
		}
		attr, ok := b.Attribute(ord)
		if !ok {
			continue
		}
		if o.handle != "" && attr.Handle() != o.handle {
			return nil, fmt.Errorf("releasing %s: handle %s, stored %s: %w", o.ip, o.handle, attr.Handle(), errConflict)
		}
		ords = append(ords, ord)
		if h := attr.Handle(); h != "" {
			counts[h]++
		}
	}
	if len(ords) == 0 {
		return nil, nil
	}
	// Calico frees the ordinals of one release in ascending order.
	slices.Sort(ords)
	seq := b.SequenceNumber
	if err := b.Release(ords...); err != nil {
		return nil, err
	}
	b.SequenceNumber = seq + 1
	return counts, nil
}

// empty is Calico's block emptiness: only Windows' reserved addresses, if
// any, are allocated.
func empty(b *calico.Block) bool {
	for _, h := range b.Held() {
		if !strings.EqualFold(h.Attribute.Handle(), windowsReserved) {
			return false
		}
	}
	return true
}

// dropAffinity makes b affine to no node, as releasing the affinity of a
// block in use does.
func dropAffinity(b *calico.Block) {
	b.Affinity, b.AffinityClaimTime = nil, nil
	b.SequenceNumber++
}

// affineTo says whether b's affinity is node's, or b has none.
func affineTo(b *calico.Block, node string) bool {
	return b.Affinity == nil || *b.Affinity == "host:"+node
}

// decrement takes n addresses in block off h, as Calico's handle
// decrement: a count that is missing or too small is an error.
func decrement(h *calico.Handle, id, block string, n int) error {
	cur, ok := h.Block[block]
	if !ok || cur < n {
		return fmt.Errorf("handle %s holds %d addresses in %s, not %d", id, cur, block, n)
	}
	if cur == n {
		delete(h.Block, block)
	} else {
		h.Block[block] = cur - n
	}
	return nil
}
