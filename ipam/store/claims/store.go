package claims

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Local is the node's own record store, the authority on its records: a
// file store, which can mark a quarantine whose holder it does not hold.
type Local interface {
	store.Store
	// QuarantineFor removes pending and marks its attachment quarantined
	// for the holder m names, in one step under the store's lock; the
	// mark fences until ForgetRemote removes it.
	QuarantineFor(ctx context.Context, pending *record.Record, m record.RemoteQuarantine) error
	// RemoteQuarantines are network's attachments so marked.
	RemoteQuarantines(ctx context.Context, network string) (map[record.Attachment]record.RemoteQuarantine, error)
	// QuarantineMarks are the same, nil for a mark that does not decode.
	QuarantineMarks(ctx context.Context, network string) (map[record.Attachment]*record.RemoteQuarantine, error)
	// UpdateRemote replaces att's mark prev with next, if it is still
	// prev (else store.ErrConflict).
	UpdateRemote(ctx context.Context, att record.Attachment, prev, next record.RemoteQuarantine) error
	// ForgetRemote removes att's mark if it is still m.
	ForgetRemote(ctx context.Context, att record.Attachment, m record.RemoteQuarantine) error
}

// errHeldUnknown: a claim on the address exists, but who holds it cannot
// be told (it does not read, or kept changing). The commit does not
// happen, and the ADD fails without releasing (its outcome is unknown to
// the guard): an address someone may hold is never taken unclaimed.
var errHeldUnknown = fmt.Errorf("%w: the address is claimed, by a holder that cannot be read", store.ErrUnavailable)

// Store is a node's record store with its claims: each commit claims its
// addresses before the node's store commits it, and each record that
// stops being committed (a DEL's or GC's mark, a forget) releases them
// before its addresses are released in Calico. A claim that cannot be
// made before any answer says the address is held (the API server does
// not answer, serves no AddressClaims, or refuses the identity) never
// fails the ADD: the record commits unclaimed, fenced on this node only,
// as without claims, Warn says why, and the node's gc claims it later.
type Store struct {
	Local
	Claims *Client
	// Node is this node's Calico name and Host this machine's: claims of
	// other nodes or machines are judged from the claim alone, this
	// machine's from its own records.
	Node, Host string
	Warn       func(msg string, err error)
	// MayForget judges a claim of this machine's that a commit meets on
	// its address, whose record (rec; nil when there is none) does not
	// hold it committed: whether it may be taken over (the rulebook's
	// Claim). Nil takes none over: the commit is fenced.
	MayForget func(cl *Claim, rec *record.Record) bool
	// CacheDir holds the node's note that claims were found not served
	// (see ForConfig); "" for none.
	CacheDir string
	// At, when set, is called at each Point (crash tests stop there).
	At func(Point)
}

// Point names a moment between the node's record and its claims, where a
// crash leaves one without the other. Crash tests stop the process there.
type Point string

// The points.
const (
	// Claimed: a commit's claims are made, its record is still pending.
	Claimed Point = "add-claimed"
	// MarkedClaimed: a record is marked releasing, its claims still stand.
	MarkedClaimed Point = "del-marked-claimed"
)

func (s *Store) at(p Point) {
	if s.At != nil {
		s.At(p)
	}
}

// Commit claims committed's addresses, then commits it in the node's
// store. An address another attachment's committed record holds is a
// *store.HeldError, as the stores' own index gives: this machine's holder
// read from its store, another's as its claim tells. A commit known not
// to have happened releases the claims it made.
func (s *Store) Commit(ctx context.Context, pending, committed *record.Record) (*record.Record, error) {
	// chaos:claims-not-made (a mutant breaks what follows)
	made, err := s.claim(ctx, s.mine(committed))
	if err != nil {
		return nil, err
	}
	s.at(Claimed)
	out, err := s.Local.Commit(ctx, pending, committed)
	var held *store.HeldError
	if errors.Is(err, store.ErrConflict) || errors.As(err, &held) {
		s.release(ctx, made)
	}
	return out, err
}

// mine is rec as this machine claims it: a record an older safe-ipam
// wrote names no host, and a file store holds its own machine's records.
func (s *Store) mine(rec *record.Record) *record.Record {
	if rec.Host != "" {
		return rec
	}
	out := *rec
	out.Host = s.Host
	return &out
}

// claim claims each address of committed and returns the claims it
// created. A HeldError, or a claim whose holder cannot be told, releases
// those first.
func (s *Store) claim(ctx context.Context, committed *record.Record) ([]*Claim, error) {
	var made []*Claim
	for _, ip := range committed.IPs {
		addr, ok := record.ParseAddr(ip)
		if !ok {
			continue
		}
		cl, err := s.claimOne(ctx, committed, addr)
		var held *store.HeldError
		switch {
		case errors.As(err, &held), errors.Is(err, errHeldUnknown):
			s.release(ctx, made)
			return nil, err
		case err != nil:
			s.Warn("committing without a cluster-wide claim; this node's gc claims it later", err)
		case cl != nil:
			made = append(made, cl)
		}
	}
	return made, nil
}

// claimOne claims addr for committed: the claim it created, nil when
// committed's own claim is there already, a *store.HeldError, or
// errHeldUnknown. Any other error came before an answer about addr.
func (s *Store) claimOne(ctx context.Context, committed *record.Record, addr netip.Addr) (*Claim, error) {
	for attempt := 0; attempt < 3; attempt++ {
		cl, err := s.Claims.Claim(ctx, committed, addr)
		switch {
		case errors.Is(err, ErrHeld) && cl == nil:
			return nil, fmt.Errorf("%w: %v", errHeldUnknown, err)
		case !errors.Is(err, ErrHeld):
			return cl, err
		// chaos:claims-another-holder-taken (a mutant breaks what follows)
		case cl.Names(committed):
			return nil, nil
		}
		holder, err := s.holder(ctx, cl)
		if err != nil {
			return nil, err
		}
		if holder != nil && !committed.TakesOver(holder) {
			return nil, &store.HeldError{Addr: ipOf(committed, addr), Holder: holder}
		}
		// This machine's claim that the rulebook lets go, or the VM
		// record committed takes over from: the claim goes, if it is
		// still the one read, and the create is tried again.
		if err := s.Claims.Release(ctx, cl); err != nil && !errors.Is(err, kubeapi.ErrConflict) {
			return nil, fmt.Errorf("%w: %v", errHeldUnknown, err)
		}
	}
	return nil, fmt.Errorf("%w: the claim on %s kept changing", errHeldUnknown, addr)
}

// holder is who holds cl's address: another node's or machine's record as
// the claim tells; this machine's as its store has it, the claim's view
// when that record does not hold it committed (an ADD between its claim
// and its commit, or a claim too young to judge) unless MayForget lets
// the claim go (nil: none holds it).
func (s *Store) holder(ctx context.Context, cl *Claim) (*record.Record, error) {
	if !s.own(cl) {
		return cl.Record(), nil
	}
	rec, err := s.Local.Get(ctx, cl.Holder)
	if err != nil {
		return nil, fmt.Errorf("%w: reading its holder %s: %v", errHeldUnknown, cl.Holder, err)
	}
	if rec != nil && rec.State == record.Committed && rec.Holds(cl.Addr) {
		return rec, nil
	}
	if s.MayForget != nil && s.MayForget(cl, rec) {
		return nil, nil
	}
	return cl.Record(), nil
}

// release releases claims this store just made, each only if unchanged;
// what it cannot release, the node's gc does.
func (s *Store) release(ctx context.Context, made []*Claim) {
	for _, cl := range made {
		if err := s.Claims.Release(ctx, cl); err != nil {
			s.Warn("a claim stays for this node's gc", err)
		}
	}
}

// Quarantine ties q to holder: in the node's store when holder is this
// machine's record; else pending goes and its attachment is marked
// quarantined for the holder's claim, which must still name holder (else
// ErrConflict: the holder changed, and the commit is tried again).
func (s *Store) Quarantine(ctx context.Context, pending, holder *record.Record, q record.Quarantine) error {
	if s.local(ctx, holder) {
		return s.Local.Quarantine(ctx, pending, holder, q)
	}
	for _, ip := range holder.IPs {
		addr, ok := record.ParseAddr(ip)
		if !ok {
			continue
		}
		cl, err := s.Claims.Get(ctx, holder.Network, addr)
		if err != nil {
			return err
		}
		if cl == nil || !cl.Names(holder) {
			return fmt.Errorf("%w: the claim on %s no longer names %s", store.ErrConflict, addr, holder.Attachment)
		}
		q.Node = s.Node
		return s.Local.QuarantineFor(ctx, pending, record.RemoteQuarantine{Quarantine: q, Claim: Name(holder.Network, addr),
			Holder: record.Peer{Attachment: holder.Attachment, Node: holder.Node}, HolderHost: holder.Host})
	}
	return fmt.Errorf("quarantining %s: the holder %s names no address", pending.Attachment, holder.Attachment)
}

// local says whether holder is a record of the node's store, as read (the
// store's own index found it; a claim's view of a holder has no
// revision): one under a former node or host name is this machine's too.
func (s *Store) local(ctx context.Context, holder *record.Record) bool {
	if holder.Revision == 0 {
		return false
	}
	rec, err := s.Local.Get(ctx, holder.Attachment)
	return err == nil && store.SameRevision(rec, holder)
}

// MarkReleasing marks the record in the node's store, then releases its
// claims, before the caller releases its addresses in Calico: a claim
// left behind would fence an address Calico hands out again.
func (s *Store) MarkReleasing(ctx context.Context, marker *record.Record) (*record.Record, error) {
	prior, _ := s.Local.Get(ctx, marker.Attachment) // a local read; nil on error: no listing
	out, err := s.Local.MarkReleasing(ctx, marker)
	if err == nil && out != nil {
		s.at(MarkedClaimed)
		// chaos:claims-kept-on-release (a mutant breaks what follows)
		s.releaseOf(ctx, out)
		// chaos:claims-of-unfinished-kept (a mutant breaks what follows)
		if prior != nil && unfinished(prior) && len(prior.IPs) == 0 {
			s.releaseUnfinished(ctx, prior)
		}
	}
	return out, err
}

// Swap swaps in the node's store, and releases the claims of prev when it
// stops being a record whose claims stand: a committed record that stops
// being committed, or one a call left unfinished (its process is gone)
// that is taken over or marked.
func (s *Store) Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	out, err := s.Local.Swap(ctx, att, prev, next)
	if err != nil || prev == nil || next != nil && next.State == record.Committed {
		return out, err
	}
	switch {
	case prev.State == record.Committed:
		s.releaseOf(ctx, prev)
	case next != nil && unfinished(prev):
		s.releaseClaimsOf(ctx, prev)
	}
	return out, err
}

// unfinished says whether rec is a pending or releasing record whose call
// is gone (a crash, or a power loss; a file store is one machine's, so its
// calls' processes are this machine's). Only such a record can have left
// claims that its own call will not settle, so only its replacement pays
// for looking. Releasing them is safe whatever the owner: once rec is
// replaced, a commit over it conflicts, and a commit known not to have
// happened releases the claims it made.
func unfinished(rec *record.Record) bool {
	return rec.State != record.Committed && !rec.Owner.Alive()
}

// releaseClaimsOf releases this machine's claims of rec, a pending or
// releasing record a killed call left, once it is replaced: those on its
// addresses that name it, or, when it names none (an ADD killed between
// its claims and its commit, or a DEL that marked such a record), those
// that name it under its node's label (a listing, on this rare path
// only). The ADD retried over rec replaces it (marked releasing) before
// its delegate releases rec's addresses, so none of them is left fenced
// by a claim once Calico frees it.
func (s *Store) releaseClaimsOf(ctx context.Context, rec *record.Record) {
	if len(rec.IPs) > 0 {
		s.releaseOf(ctx, rec)
		return
	}
	s.releaseUnfinished(ctx, rec)
}

func (s *Store) releaseOf(ctx context.Context, rec *record.Record) {
	if err := s.Claims.ReleaseOf(ctx, s.mine(rec)); err != nil {
		s.Warn("a claim of a released record stays for this node's gc", err)
	}
}

// releaseUnfinished releases the claims of rec that an ADD killed between
// its claims and its commit left: its record names no address, so they
// are found under its node's label (a former name's too), with a listing
// on the paths that settle a dead call's record only.
func (s *Store) releaseUnfinished(ctx context.Context, rec *record.Record) {
	mine := *s.mine(rec)
	if mine.Node == "" {
		mine.Node = s.Node
	}
	own, _, err := s.Claims.OfNode(ctx, mine.Network, mine.Node)
	if err != nil {
		s.Warn("the claims of an unfinished ADD stay for this node's gc", err)
		return
	}
	for _, cl := range own {
		if !cl.Names(&mine) {
			continue
		}
		if err := s.Claims.Release(ctx, cl); err != nil {
			s.Warn("a claim of an unfinished ADD stays for this node's gc", err)
		}
	}
}

// Close closes the node's store and the API server's idle connections.
func (s *Store) Close() error {
	s.Claims.Close()
	return s.Local.Close()
}

// own says whether cl is a claim of this machine's records.
func (s *Store) own(cl *Claim) bool { return cl.Node == s.Node && cl.Host == s.Host }

// OwnClaims lists this node's claims in network (those another machine
// under the same node name made among them), and names the objects under
// its label that do not read (damaged: left alone). It fails where the
// API server serves no AddressClaims, so a caller that listed them knows
// a claim it then misses is gone, not unserved.
func (s *Store) OwnClaims(ctx context.Context, network string) ([]*Claim, []string, error) {
	own, damaged, err := s.Claims.OfNode(ctx, network, s.Node)
	if err == nil {
		// Served now: the pods' ADDs and DELs claim again at once, and
		// release what this round claims.
		forgetNotServed(s.CacheDir)
	}
	return own, damaged, err
}

// ReleaseClaim releases cl if it is still the object it was read as.
func (s *Store) ReleaseClaim(ctx context.Context, cl *Claim) error {
	return s.Claims.Release(ctx, cl)
}

// Standing says whether a claim on m's address still names m's holder
// (its attachment, node and host).
func (s *Store) Standing(ctx context.Context, m record.RemoteQuarantine) (bool, error) {
	for _, ip := range m.Quarantine.IPs {
		addr, ok := record.ParseAddr(ip)
		if !ok || Name(m.Holder.Network, addr) != m.Claim {
			continue
		}
		cl, err := s.Claims.Get(ctx, m.Holder.Network, addr)
		if err != nil {
			return false, err
		}
		return cl != nil && cl.Holder == m.Holder.Attachment && cl.Node == m.Holder.Node && cl.Host == m.HolderHost, nil
	}
	return false, fmt.Errorf("the quarantine of %s names no address of the claim %s", m.Quarantine.Attachment, m.Claim)
}

// Wrap gives st, a node's record store, the claims of client, when it is
// a store that can hold them (a file store; the etcd store has its own
// index, which spans the cluster).
func Wrap(st store.Store, client *Client, node string, o Options) store.Store {
	local, ok := st.(Local)
	if !ok {
		return st
	}
	return &Store{Local: local, Claims: client, Node: node, Host: record.ThisHost(), Warn: o.Warn, MayForget: o.MayForget, CacheDir: o.cacheDir, At: o.At}
}

// ipOf is rec's address addr as its record writes it (with its prefix),
// as the other stores name a held address.
func ipOf(rec *record.Record, addr netip.Addr) string {
	for _, ip := range rec.IPs {
		if a, ok := record.ParseAddr(ip); ok && a == addr {
			return ip
		}
	}
	return addr.String()
}
