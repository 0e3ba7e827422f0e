package calico

import (
	"fmt"
	"slices"
	"strconv"
)

// AllocateOrdinal allocates one given free ordinal, wherever it sits in
// the free list. Repair uses it to re-claim an address for the record that
// still holds it; Calico itself always takes the head of the list.
func (b *Block) AllocateOrdinal(ord int, handle string, secondary map[string]string) error {
	i := slices.Index(b.Unallocated, ord)
	if i < 0 || ord < 0 || ord >= len(b.Allocations) || b.Allocations[ord] != nil {
		return fmt.Errorf("ordinal %d of %s is not free", ord, b.CIDR)
	}
	if b.SequenceNumberForAllocation == nil {
		b.SequenceNumberForAllocation = map[string]uint64{}
	}
	attr := b.attributeIndex(newAttribute(handle, secondary))
	b.Unallocated = slices.Delete(b.Unallocated, i, i+1)
	b.Allocations[ord] = &attr
	b.SequenceNumberForAllocation[strconv.Itoa(ord)] = b.SequenceNumber
	b.SequenceNumber++
	return nil
}
