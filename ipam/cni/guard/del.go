package guard

import (
	"context"
	"errors"

	"github.com/safe-ipam/safe-ipam/ipam/cni/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Del marks the record releasing, releases the attachment's own handles in
// the delegate and then forgets the record. The mark comes first so that a
// crash after the release cannot leave a committed record that a later ADD
// would replay with addresses the delegate has freed. It succeeds when
// there is nothing to release. If the delegate fails, the record stays and
// the runtime retries.
func (g *Guard) Del(ctx context.Context, env delegate.Env) error {
	att, args, err := g.attachment(env)
	if err != nil {
		return err
	}
	prev := g.delPrevResult()
	g.at(DelStart)
	now := g.now().UTC()
	// The marker carries what the DEL itself knows (the pod, and the
	// addresses its prevResult names): the etcd store writes it without
	// reading the record, so a retried DEL finds them only there.
	marker := &record.Record{Attachment: att, Node: g.node, Host: g.host, Handle: g.handle(att), Created: now, Updated: now, Owner: g.Owner,
		PodNamespace: args.Get(cniargs.PodNamespace), PodName: args.Get(cniargs.PodName), PodUID: args.Get(cniargs.PodUID), IPs: g.ipsOf(prev)}
	marked, err := g.store.MarkReleasing(ctx, marker)
	if errors.Is(err, store.ErrQuarantined) {
		// Its allocation holds an address a running attachment uses; the
		// holder's DEL or GC releases it.
		g.log.Info("DEL of a quarantined attachment: its allocation stays until its holder is released", "attachment", att.String())
		return nil
	}
	if err != nil {
		return g.delUnmarked(ctx, att, env, args, prev, err)
	}
	// chaos:forget-before-release (a mutant breaks what follows)
	g.at(DelMarked)
	if err := g.releaseWithVM(ctx, att, marked, env, args, prev); err != nil {
		return err
	}
	if marked == nil {
		// chaos:del-ignores-a-former-names-record (a mutant breaks what follows)
		if err := g.releaseRenamed(ctx, att, marker.IPs, env.Path); err != nil {
			return err
		}
	}
	g.releasePodHandle(ctx, marked, env, runtimeDEL)
	if marked, err = g.releaseQuarantines(ctx, marked, env); err != nil {
		return err
	}
	g.at(DelReleased)
	if marked != nil {
		// A conflict means an ADD took the attachment over meanwhile.
		if _, err := g.store.Swap(ctx, att, marked, nil); err != nil && !errors.Is(err, store.ErrConflict) {
			return storeError("forgetting "+att.String(), err)
		}
		g.handBack(ctx, marked)
	}
	g.at(DelForgotten)
	g.log.Info("DEL", "attachment", att.String())
	return nil
}

// ipsOf lists the addresses of a prevResult in the delegate's version, or
// none when there is none or it does not parse.
func (g *Guard) ipsOf(prev []byte) []string {
	if prev == nil {
		return nil
	}
	res, err := parseResult(g.version, prev)
	if err != nil {
		return nil
	}
	ips, _ := resultIPs(res)
	return ips
}
