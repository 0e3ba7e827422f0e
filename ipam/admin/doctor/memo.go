package doctor

import (
	"context"
	"net/netip"
	"sync"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Memo keeps, across the full checks of one watch, what a later check
// need not read again: the handle Calico keeps a sampled record's address
// under (fixed for as long as the record lives), and the block size its
// block was found at. On the Kubernetes datastore every block candidate
// is one GET: a node with a non-default block size cost up to 13 of them
// per check, on every node; with the memo, a check reads the Node and one
// block, and a new record's block at the size found before. Whether the
// node is known, and that Calico's IPAM data answers, are read every
// time: they can change.
type Memo struct {
	mu sync.Mutex
	// handles are the sampled records' handles by memoKey, from the last
	// check alone: the memo stays as small as the sample.
	handles, next map[string]string
	// blockBits is the size blocks were last found at, by address family
	// (true: IPv6).
	blockBits map[bool]int
}

// Check is the full Check, reading again only what can have changed
// since this memo's last one.
func (m *Memo) Check(ctx context.Context, n cninode.Dirs) (*Report, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.begin()
	defer m.end()
	return check(ctx, n, nil, judge{memo: m})
}

// begin starts a check; end keeps what it sampled alone.
func (m *Memo) begin() { m.next = map[string]string{} }
func (m *Memo) end()   { m.handles, m.next = m.next, nil }

// memoKey names a record's first address under its attachment.
func memoKey(rec *record.Record, addr netip.Addr) string {
	return rec.Network + "/" + rec.ContainerID + "/" + rec.IfName + "/" + addr.String()
}

// handle is the memo's handle of rec's addr; ok says it has one. A nil
// memo has none.
func (m *Memo) handle(rec *record.Record, addr netip.Addr) (string, bool) {
	if m == nil {
		return "", false
	}
	h, ok := m.handles[memoKey(rec, addr)]
	if ok {
		m.next[memoKey(rec, addr)] = h
	}
	return h, ok
}

// keep remembers the handle of rec's addr, read in this check.
func (m *Memo) keep(rec *record.Record, addr netip.Addr, handle string) {
	if m != nil {
		m.next[memoKey(rec, addr)] = handle
	}
}

// candidates are the blocks that may hold addr, the size a block was last
// found at first.
func (m *Memo) candidates(addr netip.Addr, all []netip.Prefix) []netip.Prefix {
	if m == nil {
		return all
	}
	bits, ok := m.blockBits[addr.Is6()]
	if !ok {
		return all
	}
	out := make([]netip.Prefix, 0, len(all))
	for _, p := range all {
		if p.Bits() == bits {
			out = append([]netip.Prefix{p}, out...)
		} else {
			out = append(out, p)
		}
	}
	return out
}

// found remembers the size of the block addr was found in.
func (m *Memo) found(addr netip.Addr, block netip.Prefix) {
	if m == nil {
		return
	}
	if m.blockBits == nil {
		m.blockBits = map[bool]int{}
	}
	m.blockBits[addr.Is6()] = block.Bits()
}
