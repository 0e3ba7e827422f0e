package audit

import (
	"iter"
	"net/netip"

	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// chains groups item numbers by key number, in the order they were
// added, without a slice or a map entry per key: a million keys with a
// slice each made the audit's indexes its largest allocation.
type chains struct {
	last    []int32 // by key: its last entry, or -1
	entries []entry
}

type entry struct {
	item int32
	prev int32 // the key's entry before this one, or -1
}

func newChains(keys, items int) chains {
	c := chains{last: make([]int32, keys), entries: make([]entry, 0, items)}
	for i := range c.last {
		c.last[i] = -1
	}
	return c
}

func (c *chains) add(key, item int) {
	for len(c.last) <= key {
		c.last = append(c.last, -1)
	}
	c.last[key], c.entries = int32(len(c.entries)), append(c.entries, entry{item: int32(item), prev: c.last[key]})
}

// items lists key's items in the order added.
func (c *chains) items(key int) []int32 {
	var out []int32
	for e := c.at(key); e >= 0; e = c.entries[e].prev {
		out = append(out, c.entries[e].item)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// first is key's first item, and whether it is its only one: the common
// case needs no list. A key without items has item -1.
func (c *chains) first(key int) (item int32, only bool) {
	e := c.at(key)
	if e < 0 {
		return -1, false
	}
	only = c.entries[e].prev < 0
	for c.entries[e].prev >= 0 {
		e = c.entries[e].prev
	}
	return c.entries[e].item, only
}

func (c *chains) at(key int) int32 {
	if key < 0 || key >= len(c.last) {
		return -1
	}
	return c.last[key]
}

func (c *chains) has(key int) bool { return c.at(key) >= 0 }

// addrIndex numbers addresses. IPv4 addresses, nearly all of them, are
// keyed by their 4 bytes: a map without pointers, which the collector
// need not scan, a quarter the size of one keyed by netip.Addr.
type addrIndex struct {
	v4    map[uint32]int32
	other map[netip.Addr]int32
}

func newAddrIndex(n int) addrIndex {
	return addrIndex{v4: make(map[uint32]int32, n), other: map[netip.Addr]int32{}}
}

func (x addrIndex) get(addr netip.Addr) (int32, bool) {
	if addr.Is4() {
		k, ok := x.v4[v4Key(addr)]
		return k, ok
	}
	k, ok := x.other[addr]
	return k, ok
}

func (x addrIndex) set(addr netip.Addr, k int32) {
	if addr.Is4() {
		x.v4[v4Key(addr)] = k
		return
	}
	x.other[addr] = k
}

// all gives every address with its number, in no order.
func (x addrIndex) all() iter.Seq2[netip.Addr, int32] {
	return func(yield func(netip.Addr, int32) bool) {
		for v, k := range x.v4 {
			if !yield(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), k) {
				return
			}
		}
		for addr, k := range x.other {
			if !yield(addr, k) {
				return
			}
		}
	}
}

func v4Key(addr netip.Addr) uint32 {
	b := addr.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// handleKey numbers a handle: its snapshot slot, or past them for one the
// snapshot does not name (a snapshot built by hand).
func (a *analysis) handleKey(h string, add bool) (int, bool) {
	if slot, ok := a.snap.HandleSlot(h); ok {
		return slot, true
	}
	k, ok := a.otherHandles[h]
	if !ok && add {
		k = a.snap.HandleSlots() + len(a.otherIDs)
		a.otherHandles[h], a.otherIDs, ok = k, append(a.otherIDs, h), true
	}
	return k, ok
}

func (a *analysis) handleID(key int) string {
	if n := a.snap.HandleSlots(); key >= n {
		return a.otherIDs[key-n]
	}
	return a.snap.HandleID(key)
}

// addrKey numbers an address allocated or recorded.
func (a *analysis) addrKey(addr netip.Addr, add bool) (int, bool) {
	k, ok := a.addrs.get(addr)
	if !ok && add {
		k, ok = int32(len(a.allocAt)), true
		a.addrs.set(addr, k)
		a.allocAt = append(a.allocAt, -1)
	}
	return int(k), ok
}

// allocation is the allocation of addr, nil when Calico has it free.
func (a *analysis) allocation(addr netip.Addr) *snapshot.Allocation {
	k, ok := a.addrKey(addr, false)
	if !ok || a.allocAt[k] < 0 {
		return nil
	}
	return a.snap.Allocations.At(int(a.allocAt[k]))
}

// allocsOf are the allocations under handle key k.
func (a *analysis) allocsOf(k int) []*snapshot.Allocation {
	items := a.byHandle.items(k)
	out := make([]*snapshot.Allocation, len(items))
	for i, n := range items {
		out[i] = a.snap.Allocations.At(int(n))
	}
	return out
}

func (a *analysis) recordsAt(items []int32) []*record.Record {
	out := make([]*record.Record, len(items))
	for i, n := range items {
		out[i] = a.snap.Records[n]
	}
	return out
}

// recordsHere are the committed records of address key k. The common
// single record comes without a new list: a million of them were most of
// what the audit's last step allocated. The list is valid until the next
// call.
func (a *analysis) recordsHere(k int) []*record.Record {
	if item, only := a.recByAddr.first(k); only {
		a.one[0] = a.snap.Records[item]
		return a.one[:]
	}
	return a.recordsAt(a.recByAddr.items(k))
}

// recordsByHandle are the records that hold handle.
func (a *analysis) recordsByHandle(handle string) []*record.Record {
	k, ok := a.handleKey(handle, false)
	if !ok {
		return nil
	}
	return a.recordsAt(a.recByHdl.items(k))
}

// recordHeld: a record holds handle.
func (a *analysis) recordHeld(handle string) bool {
	k, ok := a.handleKey(handle, false)
	return ok && a.recByHdl.has(k)
}
