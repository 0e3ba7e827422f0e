package audit

// chains groups item numbers by key, in the order they were added,
// without a slice per key: a million keys with a slice each made the
// audit's indexes its largest allocation.
type chains[K comparable] struct {
	last    map[K]int32 // the key's last entry
	entries []entry
}

type entry struct {
	item int32
	prev int32 // the key's entry before this one, or -1
}

func newChains[K comparable](n int) chains[K] {
	return chains[K]{last: make(map[K]int32, n), entries: make([]entry, 0, n)}
}

func (c *chains[K]) add(k K, item int) {
	prev, ok := c.last[k]
	if !ok {
		prev = -1
	}
	c.last[k] = int32(len(c.entries))
	c.entries = append(c.entries, entry{item: int32(item), prev: prev})
}

// items lists the items of the chain ending at last, in the order added.
func (c *chains[K]) items(last int32) []int32 {
	var out []int32
	for e := last; e >= 0; e = c.entries[e].prev {
		out = append(out, c.entries[e].item)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// has says whether k has any item.
func (c *chains[K]) has(k K) bool {
	_, ok := c.last[k]
	return ok
}
