package snapshot

import "iter"

// Allocations are the allocations the scan read, kept in the chunks it
// filled: one slice of a million, copied from them at the end, was the
// audit's largest allocation at its peak (docs/performance.md).
type Allocations struct {
	chunks [][]Allocation
	n      int
}

const (
	chunkBits = 14
	chunkSize = 1 << chunkBits
)

// NewAllocations holds als, in their order.
func NewAllocations(als ...Allocation) Allocations {
	var a Allocations
	for _, al := range als {
		a.append(al)
	}
	return a
}

// Len is how many there are.
func (a *Allocations) Len() int { return a.n }

// At is allocation i, 0 <= i < Len(); it stays where it is.
func (a *Allocations) At(i int) *Allocation {
	return &a.chunks[i>>chunkBits][i&(chunkSize-1)]
}

// All gives each allocation with its number, in order.
func (a *Allocations) All() iter.Seq2[int, *Allocation] {
	return func(yield func(int, *Allocation) bool) {
		i := 0
		for _, c := range a.chunks {
			for j := range c {
				if !yield(i, &c[j]) {
					return
				}
				i++
			}
		}
	}
}

func (a *Allocations) append(al Allocation) {
	if n := len(a.chunks); n == 0 || len(a.chunks[n-1]) == chunkSize {
		a.chunks = append(a.chunks, make([]Allocation, 0, chunkSize))
	}
	last := &a.chunks[len(a.chunks)-1]
	*last = append(*last, al)
	a.n++
}
