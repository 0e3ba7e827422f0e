package guard

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// claimed is a node's store with cluster-wide claims (claims.Store).
type claimed interface {
	OwnClaims(ctx context.Context, network string) ([]*claims.Claim, []string, error)
	ReleaseClaim(ctx context.Context, cl *claims.Claim) error
	RemoteQuarantines(ctx context.Context, network string) (map[record.Attachment]record.RemoteQuarantine, error)
	Standing(ctx context.Context, m record.RemoteQuarantine) (bool, error)
	UpdateRemote(ctx context.Context, att record.Attachment, prev, next record.RemoteQuarantine) error
	ForgetRemote(ctx context.Context, att record.Attachment, m record.RemoteQuarantine) error
}

// The claims store is what SettleClaims settles: checked when built, not
// found wanting at run time.
var _ claimed = (*claims.Store)(nil)

// ClaimsSettled is what SettleClaims did.
type ClaimsSettled struct {
	// Forgotten claims of this node that no record of it holds;
	// Claimed addresses of committed records that had no claim (an ADD
	// that could not make it); Unquarantined allocations this node kept
	// for another node's holder that is gone; Waiting those whose
	// holder's claim is gone, not for the grace yet.
	Forgotten, Claimed, Unquarantined, Waiting int
	// Held are the addresses of this node's records that another
	// record's claim holds: two holders, a duplicate for the audit.
	Held []*store.HeldError
}

// SettleClaims settles what the claims leave behind on this node, as the
// rulebook judges it: this node's claims that none of its records holds
// (a crash between a claim and its commit, a release whose claim did not
// go) are forgotten; committed records without their claims (an ADD that
// could not make them) are claimed; and each allocation quarantined here
// for another node's holder is released, and its mark forgotten, once
// that holder's claim is gone. A store without claims has nothing to
// settle. safe-ipam gc --apply does it every round (the GC verb does
// not: one grace, gc's, rules the quarantines); the listing of this
// node's claims comes first, so that a claim missing afterwards is known
// gone, not unserved.
func (g *Guard) SettleClaims(ctx context.Context, cniPath string, quarantineGrace time.Duration) (ClaimsSettled, error) {
	var done ClaimsSettled
	cs, ok := g.store.(claimed)
	if !ok {
		return done, nil
	}
	own, damaged, err := cs.OwnClaims(ctx, g.cfg.Network)
	if errors.Is(err, claims.ErrNotServed) {
		// No claims in this cluster (or none this identity may read): the
		// quarantines kept for other nodes' holders stay, since nothing
		// says those holders are gone.
		return done, nil
	}
	if err != nil {
		return done, fmt.Errorf("listing this node's claims: %w", err)
	}
	if len(damaged) > 0 {
		g.log.Warn("AddressClaims under this node's label that do not read are left alone; delete them by hand", "claims", damaged)
	}
	_, errs := g.forgetOwnClaims(ctx, cs, own, &done)
	if err := g.claimUnclaimed(ctx, own, &done); err != nil {
		errs = append(errs, err)
	}
	err = g.settleRemoteQuarantines(ctx, cs, cniPath, quarantineGrace, &done)
	return done, errors.Join(append(errs, err)...)
}

// forgetOwnClaims releases each of own, this node's claims, that the
// rulebook lets go (rulebook.Claim: no record of this node holds it, and
// it is not a claim an ADD may still be committing); it returns why it
// kept those of this machine's (another machine's under this node name
// is that machine's to judge).
func (g *Guard) forgetOwnClaims(ctx context.Context, cs claimed, own []*claims.Claim, done *ClaimsSettled) (kept []string, errs []error) {
	for _, cl := range own {
		rec, err := g.store.Get(ctx, cl.Holder)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		v := rulebook.Claim(rulebook.ClaimCase{Node: cl.Node, Host: cl.Host, Self: g.node, SelfHost: g.host, Addr: cl.Addr, Record: rec, Age: g.now().Sub(cl.Created)})
		if !v.Release {
			if cl.Node == g.node && cl.Host == g.host {
				kept = append(kept, cl.Addr.String()+": "+v.Why)
			}
			continue
		}
		if err := cs.ReleaseClaim(ctx, cl); err != nil {
			errs = append(errs, err)
			continue
		}
		done.Forgotten++
		g.log.Info("forgot a claim no record holds", "attachment", cl.Holder.String(), "address", cl.Addr.String(), "why", v.Why)
	}
	return kept, errs
}

// ForgetOwnClaims is uninstall's last step on a network, once this
// node's records are forgotten: every claim of this node that no record
// holds goes (a release that failed while its record was forgotten, an
// ADD killed between its claim and its commit), as gc's SettleClaims
// would, so that none outlives safe-ipam on the node and fences its
// address for ever. A claim the rulebook keeps fails it: uninstall is run
// again. Claims not served leave nothing to forget.
func (g *Guard) ForgetOwnClaims(ctx context.Context) (int, error) {
	var done ClaimsSettled
	cs, ok := g.store.(claimed)
	if !ok {
		return 0, nil
	}
	own, damaged, err := cs.OwnClaims(ctx, g.cfg.Network)
	if errors.Is(err, claims.ErrNotServed) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("listing this node's claims: %w", err)
	}
	if len(damaged) > 0 {
		g.log.Warn("AddressClaims under this node's label that do not read are left alone; delete them by hand", "claims", damaged)
	}
	kept, errs := g.forgetOwnClaims(ctx, cs, own, &done)
	if len(kept) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d claim(s) of this machine kept (%s): run uninstall again", store.ErrUnavailable, len(kept), kept[0]))
	}
	return done.Forgotten, errors.Join(errs...)
}

// claimUnclaimed commits over itself each committed record of this node
// that lacks a claim on one of its addresses: the store claims before it
// commits (as store.Reindex does for the whole node).
func (g *Guard) claimUnclaimed(ctx context.Context, own []*claims.Claim, done *ClaimsSettled) error {
	claimed := map[record.Attachment]map[netip.Addr]bool{}
	for _, cl := range own {
		if claimed[cl.Holder] == nil {
			claimed[cl.Holder] = map[netip.Addr]bool{}
		}
		claimed[cl.Holder][cl.Addr] = true
	}
	recs, err := g.store.List(ctx, g.cfg.Network)
	if err != nil {
		return err
	}
	var errs []error
	for _, rec := range recs {
		missing := 0
		for _, ip := range rec.IPs {
			if a, ok := record.ParseAddr(ip); ok && !claimed[rec.Attachment][a] {
				missing++
			}
		}
		if rec.State != record.Committed || missing == 0 {
			continue
		}
		_, err := g.store.Commit(ctx, rec, rec)
		var held *store.HeldError
		switch {
		case errors.As(err, &held):
			done.Held = append(done.Held, held)
			g.log.Warn("an address of this node's record is claimed by another: two holders, run safe-ipam audit", "attachment", rec.Attachment.String(), "address", held.Addr, "holder", held.Holder.Attachment.String(), "node", held.Holder.Node)
		case errors.Is(err, store.ErrConflict):
			// Changed meanwhile: whoever changed it claimed or released it.
		case err != nil:
			errs = append(errs, err)
		default:
			done.Claimed += missing
		}
	}
	return errors.Join(errs...)
}

// settleRemoteQuarantines releases, through the delegate, the allocation
// of each attachment quarantined for another node's holder once its
// claim stays gone (rulebook.RemoteQuarantine), and then forgets the
// mark; it notes, in the mark, when the claim was first found gone.
func (g *Guard) settleRemoteQuarantines(ctx context.Context, cs claimed, cniPath string, grace time.Duration, done *ClaimsSettled) error {
	marks, err := cs.RemoteQuarantines(ctx, g.cfg.Network)
	if err != nil {
		return err
	}
	var errs []error
	for att, m := range marks {
		standing, err := cs.Standing(ctx, m)
		v := rulebook.RemoteQuarantine(rulebook.RemoteQuarantineCase{Standing: standing, ReadErr: err, GoneSince: m.GoneSince, Now: g.now().UTC(), Grace: grace})
		if !v.Release {
			if v.GoneSince != nil {
				done.Waiting++
			}
			if !sameTime(v.GoneSince, m.GoneSince) {
				next := m
				next.GoneSince = v.GoneSince
				if err := cs.UpdateRemote(ctx, att, m, next); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		holder := &record.Record{Attachment: m.Holder.Attachment, Node: m.Holder.Node, Host: m.HolderHost}
		if err := g.releaseQuarantine(delegate.Env{Path: cniPath})(ctx, holder, m.Quarantine); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := cs.ForgetRemote(ctx, att, m); err != nil {
			errs = append(errs, err)
			continue
		}
		done.Unquarantined++
		g.log.Info("released a quarantined allocation", "attachment", att.String(), "why", v.Why)
	}
	return errors.Join(errs...)
}

func sameTime(a, b *time.Time) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Equal(*b)
}
