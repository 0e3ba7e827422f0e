package calico

import "net/netip"

// Handle counts the addresses one handle holds in each block, stored
// under HandleKey(id). Calico releases a handle's addresses all at once.
type Handle struct {
	// Block maps a block CIDR ("10.244.166.128/26") to an address count.
	Block   map[string]int `json:"block"`
	Deleted bool           `json:"deleted"`
}

// NewHandle returns a handle that holds nothing yet.
func NewHandle() *Handle { return &Handle{Block: map[string]int{}} }

// Add records n more addresses in block.
func (h *Handle) Add(block netip.Prefix, n int) {
	if h.Block == nil {
		h.Block = map[string]int{}
	}
	h.Block[block.String()] += n
}

// Remove records n fewer addresses in block, dropping the block at zero.
func (h *Handle) Remove(block netip.Prefix, n int) {
	k := block.String()
	h.Block[k] -= n
	if h.Block[k] <= 0 {
		delete(h.Block, k)
	}
}

// Total is the number of addresses held across all blocks.
func (h *Handle) Total() int {
	n := 0
	for _, c := range h.Block {
		n += c
	}
	return n
}

// Empty reports whether the handle holds no address.
func (h *Handle) Empty() bool { return h.Total() == 0 }
