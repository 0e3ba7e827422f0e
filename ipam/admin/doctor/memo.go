package doctor

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
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
// time: they can change. A network's claims found served, with every
// permission granted and the sweeps' Lease there, are taken as found for
// an hour, or until this node's CNI calls or gc find them not served
// (their note in the cache dir): the check asks four requests of the API
// server on every node (issue 45's scale).
type Memo struct {
	mu sync.Mutex
	// handles are the sampled records' handles by memoKey, from the last
	// check alone: the memo stays as small as the sample.
	handles, next map[string]string
	// blockBits is the size blocks were last found at, by address family
	// (true: IPv6).
	blockBits map[bool]int
	// claims are the networks' claims reports found with nothing wrong,
	// and when.
	claims map[string]foundClaims
}

// claimsRecheck is how long a watch takes a claims check with nothing
// wrong as found: a Lease or a binding deleted since is seen within it.
const claimsRecheck = time.Hour

type foundClaims struct {
	report *ClaimsReport
	at     time.Time
}

// claimsOf is checkClaims of cfg's network, or, in a watch, the report
// of an earlier check that found nothing wrong, while the node has no
// note of claims not served since.
func (m *Memo) claimsOf(ctx context.Context, cfg *config.Config) *ClaimsReport {
	if m == nil {
		return checkClaims(ctx, cfg)
	}
	if f, ok := m.claims[cfg.Network]; ok && time.Since(f.at) < claimsRecheck {
		if noted, ok := claims.NotServedAt(cfg.CacheDir); !ok || noted.Before(f.at) {
			kept := *f.report
			return &kept
		}
	}
	at := time.Now()
	r := checkClaims(ctx, cfg)
	delete(m.claims, cfg.Network)
	if r != nil && r.fine() {
		if m.claims == nil {
			m.claims = map[string]foundClaims{}
		}
		m.claims[cfg.Network] = foundClaims{report: r, at: at}
	}
	return r
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
