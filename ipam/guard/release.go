package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/safe-ipam/safe-ipam/ipam/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// Witness is the rulebook's evidence for this node's records: listing
// (nil for none), this Guard's clock and gcGracePeriod, and whether the
// store holds other machines' records too. forget is repair's.
func (g *Guard) Witness(listing *rulebook.Listing, forget bool) rulebook.Witness {
	// chaos:gc-keeps-a-renamed-hosts-records (a mutant breaks what follows)
	_, shared := g.store.(store.Cluster)
	return rulebook.Witness{Node: g.node, Shared: shared, Listing: listing, Now: g.now(), Grace: g.cfg.GCGracePeriod, Forget: forget}
}

// DeadNodeWitness is the evidence against the records of this Guard's
// node (a ForNode Guard) when Calico no longer knows it: its death, not a
// runtime, so they are judged whichever host wrote them.
func (g *Guard) DeadNodeWitness(death *rulebook.Death) rulebook.Witness {
	w := g.Witness(nil, false)
	w.Death = death
	return w
}

// Collect releases one record as DEL does: mark, delegate DEL (with
// CNI_PATH cniPath), forget. It marks the record it listed first; if the
// record changed meanwhile (a DEL marked it, an ADD took it over), it
// judges the record as it is now by rules, so a GC that succeeds has
// released every attachment the rules do not keep. The GC verb and
// safe-ipam gc both collect through it.
func (g *Guard) Collect(ctx context.Context, rec *record.Record, cniPath string, w rulebook.Witness) error {
	return g.collect(ctx, rec, cniPath, w, ownJudgment)
}

// collect is Collect; own says whose word frees a pod-name handle
// (releasePodHandle).
func (g *Guard) collect(ctx context.Context, rec *record.Record, cniPath string, w rulebook.Witness, own evidence) error {
	env := delegate.Env{Path: cniPath}
	att := rec.Attachment
	for attempt := 0; ; attempt++ {
		marker := store.Releasing(rec, g.now().UTC())
		marker.Owner = g.Owner
		marked, err := g.store.Swap(ctx, att, rec, marker)
		if errors.Is(err, store.ErrConflict) && attempt < 3 {
			if rec = marked; rec == nil || !w.Judge(rec).Release {
				return nil
			}
			continue
		}
		if err != nil {
			return storeError("marking "+att.String(), err)
		}
		return g.releaseMarked(ctx, marked, env, own)
	}
}

func (g *Guard) releaseMarked(ctx context.Context, marked *record.Record, env delegate.Env, own evidence) error {
	att := marked.Attachment
	if err := g.releaseWithVM(ctx, att, marked, delegate.Env{Path: env.Path}, cniargs.Args{}, nil); err != nil {
		return err
	}
	g.releasePodHandle(ctx, marked, env, own)
	marked, err := g.releaseQuarantines(ctx, marked, env)
	if err != nil {
		return err
	}
	g.at(GCReleased)
	if _, err := g.store.Swap(ctx, att, marked, nil); err != nil && !errors.Is(err, store.ErrConflict) {
		return storeError("forgetting "+att.String(), err)
	}
	g.handBack(ctx, marked)
	g.at(GCForgotten)
	g.log.Info("GC released", "attachment", att.String(), "ips", marked.IPs)
	return nil
}

// Forget drops rec, with its address index entries, for uninstall: its
// own addresses stay allocated (its pod runs; Calico's DEL frees them
// once safe-ipam is gone). Each allocation quarantined with it is first
// given fate (nil: released through the delegate, as the holder's DEL
// would), since no DEL of safe-ipam will come for it.
func (g *Guard) Forget(ctx context.Context, rec *record.Record, cniPath string, fate QuarantineFate) error {
	if fate == nil {
		fate = g.releaseQuarantine(delegate.Env{Path: cniPath})
	}
	rec, err := g.settleQuarantines(ctx, rec, fate)
	if err != nil {
		return err
	}
	if _, err := g.store.Swap(ctx, rec.Attachment, rec, nil); err != nil {
		return fmt.Errorf("forgetting %s: %w", rec.Attachment, err)
	}
	return nil
}
