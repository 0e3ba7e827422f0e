package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/cni/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Add records a pending claim, lets the delegate allocate, and commits the
// addresses. A committed record is answered from the record; a pending one
// (an ADD that crashed) is released and started over.
func (g *Guard) Add(ctx context.Context, env delegate.Env) (types.Result, error) {
	att, args, err := g.attachment(env)
	if err != nil {
		return nil, err
	}
	if err := podIdentity(args); err != nil {
		return nil, err
	}
	g.at(AddStart)
	rec, err := g.reserve(ctx, att, env, args)
	if err != nil {
		return nil, err
	}
	if rec.State == record.Committed {
		g.log.Info("ADD answered from record", "attachment", att.String(), "ips", rec.IPs)
		return g.replay(rec)
	}
	result, err := g.delegate.Add(ctx, g.cfg.DelegateConfig(g.version, nil), g.addCall(att, env, args))
	g.at(AddDelegated)
	if err != nil {
		return nil, g.abandon(ctx, rec, env, args, err)
	}
	if err := g.commit(ctx, rec, result, env.Path); err != nil {
		return nil, g.commitFailed(ctx, rec, env, args, err)
	}
	g.at(AddCommitted)
	return convertResult(result, g.cfg.CNIVersion)
}

// reserve writes the pending record, or returns the committed one.
func (g *Guard) reserve(ctx context.Context, att record.Attachment, env delegate.Env, args cniargs.Args) (*record.Record, error) {
	pending := g.newRecord(att, args)
	cur, err := g.store.Swap(ctx, att, nil, pending)
	if errors.Is(err, store.ErrQuarantined) {
		return nil, &sandboxRetry{types.NewError(types.ErrTryAgainLater, fmt.Sprintf("%s: an earlier ADD was given an address a running attachment holds, and that allocation is quarantined until its holder is released; start the pod in a new sandbox", att), "")}
	}
	if errors.Is(err, store.ErrConflict) && cur != nil && cur.State != record.Committed {
		if cur.Owner.Alive() {
			return nil, &sandboxRetry{types.NewError(types.ErrTryAgainLater, fmt.Sprintf("%s: another operation (pid %d) is %s it", att, cur.Owner.PID, cur.State), "")}
		}
		cur, err = g.restart(ctx, cur, pending, env, args)
	}
	if errors.Is(err, store.ErrConflict) && cur != nil && cur.State == record.Committed {
		return cur, nil
	}
	if err != nil {
		return nil, storeError("recording "+att.String(), err)
	}
	g.at(AddReserved)
	return cur, nil
}

// restart recovers from an ADD that stopped between its pending record and
// its commit, or a DEL that stopped after its mark (its process is gone):
// whatever the delegate holds for the attachment is released before the
// new attempt takes the record over. It marks the record releasing under
// this process first, so that an ADD racing it finds the record at work
// and retries later, and a store whose records claim their addresses
// cluster-wide releases the stale record's claims with that write, before
// its addresses go back to Calico.
func (g *Guard) restart(ctx context.Context, stale, pending *record.Record, env delegate.Env, args cniargs.Args) (*record.Record, error) {
	g.log.Warn("ADD found an unfinished record; releasing before retrying", "attachment", stale.Attachment.String(), "state", stale.State, "since", stale.Updated)
	marker := store.Releasing(stale, g.now().UTC())
	marker.Owner = g.Owner
	marked, err := g.store.Swap(ctx, stale.Attachment, stale, marker)
	if err != nil {
		return marked, err
	}
	if err := g.release(ctx, marked.Attachment, env, args, nil); err != nil {
		return nil, err
	}
	// A DEL that stopped after its mark had not released the quarantines
	// tied to the record yet; taking the record over drops them.
	if marked, err = g.releaseQuarantines(ctx, marked, env); err != nil {
		return nil, err
	}
	g.at(AddRecovered)
	return g.store.Swap(ctx, marked.Attachment, marked, pending)
}

func (g *Guard) newRecord(att record.Attachment, args cniargs.Args) *record.Record {
	now := g.now().UTC()
	return &record.Record{
		Attachment:   att,
		PodNamespace: args.Get(cniargs.PodNamespace),
		PodName:      args.Get(cniargs.PodName),
		PodUID:       args.Get(cniargs.PodUID),
		Node:         g.node,
		Host:         g.host,
		Handle:       g.handle(att),
		State:        record.Pending,
		Created:      now,
		Updated:      now,
		Owner:        g.Owner,
	}
}

// addCall passes pod identity only to a delegate that keys ADD by
// container anyway (Calico 3.x uses it for attributes).
func (g *Guard) addCall(att record.Attachment, env delegate.Env, args cniargs.Args) delegate.Env {
	cniArgs := env.Args
	if g.cfg.DelegateHandles == config.HandlesPod {
		// chaos:add-passes-pod-identity (a mutant breaks what follows)
		cniArgs = args.WithoutPodIdentity().String()
	}
	return delegate.Env{ContainerID: att.ContainerID, NetNS: env.NetNS, IfName: att.IfName, Args: cniArgs, Path: env.Path}
}

func (g *Guard) commit(ctx context.Context, pending *record.Record, result types.Result, cniPath string) error {
	ips, err := resultIPs(result)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("%s result for %s: %v", g.delegate.Type, pending.Attachment, err), "")
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("%s result for %s: %v", g.delegate.Type, pending.Attachment, err), "")
	}
	committed := *pending
	committed.State, committed.IPs, committed.Result, committed.Updated = record.Committed, ips, raw, g.now().UTC()
	committed.Owner = nil
	if vm := g.vmHandle(ctx, pending, ips); vm != "" {
		committed.Handle = vm
	}
	// chaos:fencing-disabled (a mutant breaks what follows)
	_, err = g.store.Commit(ctx, pending, &committed)
	var held *store.HeldError
	if errors.As(err, &held) && committed.Shares(held.Holder) {
		err = g.share(ctx, pending, &committed, held.Holder)
	}
	if errors.As(err, &held) && g.settleDeadHolder(ctx, held.Holder, cniPath) {
		_, err = g.store.Commit(ctx, pending, &committed)
	}
	if errors.As(err, &held) {
		err = g.fence(ctx, pending, &committed, held)
	}
	if err != nil {
		return err
	}
	// The handle is Calico's own only when it was read from Calico's data
	// (a VM's); otherwise it is the one safe-ipam's DEL releases, which
	// doctor compares with Calico's data.
	key := "expectedHandle"
	if record.SharedHandle(committed.Network, committed.Handle) {
		key = "handle"
	}
	g.log.Info("ADD", "attachment", pending.Attachment.String(), "ips", ips, key, committed.Handle)
	return nil
}

// commitFailed decides what a failed commit leaves. Only a commit known
// not to have happened may release: a store that did not answer may have
// applied it, and releasing under a committed record is how an address
// ends up held twice. Unreleased, the addresses stay claimed by a record,
// pending or committed, which the next ADD, DEL or GC settles.
func (g *Guard) commitFailed(ctx context.Context, pending *record.Record, env delegate.Env, args cniargs.Args, err error) error {
	var cniErr *types.Error
	var f *fenced
	if errors.As(err, &f) {
		return f // as it is: NodeFailing tells a fence from the node's failure
	}
	// chaos:release-on-unknown-commit (a mutant breaks what follows)
	if errors.Is(err, store.ErrConflict) || errors.As(err, &cniErr) {
		return g.abandon(ctx, pending, env, args, storeError("committing "+pending.Attachment.String(), err))
	}
	g.log.Error("ADD commit outcome unknown; keeping the addresses under the record for a retry, DEL or GC", "attachment", pending.Attachment.String(), "error", err)
	return storeError("committing "+pending.Attachment.String()+" (outcome unknown, retry)", err)
}

// abandon undoes a failed ADD: the delegate releases whatever it may hold
// and the pending record goes. If either step fails, the pending record
// stays, and the next ADD, DEL or GC of the attachment releases it.
func (g *Guard) abandon(ctx context.Context, pending *record.Record, env delegate.Env, args cniargs.Args, cause error) error {
	att := pending.Attachment
	if err := g.release(ctx, att, env, args, nil); err != nil {
		g.log.Error("ADD failed and its release failed; a pending record stays for DEL or GC", "attachment", att.String(), "cause", cause, "error", err)
		g.keepClaim(ctx, pending)
		return cause
	}
	g.at(AddFailedReleased)
	if _, err := g.store.Swap(ctx, att, pending, nil); err != nil && !errors.Is(err, store.ErrConflict) {
		g.log.Error("ADD failed; removing its pending record failed", "attachment", att.String(), "error", err)
	}
	g.log.Warn("ADD failed and was released", "attachment", att.String(), "error", cause)
	return cause
}

// keepClaim makes sure a record claims the attachment after a release
// failed: a DEL that ran during this ADD may have removed the pending
// record, and nothing else would remember what the delegate holds. The
// claim names no process, so the next ADD, DEL or GC releases it. Any
// other record of the attachment (a DEL's marker, a later ADD's pending
// or committed record) already claims the same container handle, so it
// is left as it is: replacing a later ADD's committed record would
// unfence a running pod.
func (g *Guard) keepClaim(ctx context.Context, pending *record.Record) {
	claim := *pending
	claim.Owner, claim.Updated = nil, g.now().UTC()
	cur := pending
	for attempt := 0; attempt < 3; attempt++ {
		got, err := g.store.Swap(ctx, pending.Attachment, cur, &claim)
		if !errors.Is(err, store.ErrConflict) {
			if err != nil {
				g.log.Error("could not leave a claim for the unreleased addresses", "attachment", pending.Attachment.String(), "error", err)
			}
			return
		}
		if got != nil {
			return // another record claims the handle
		}
		cur = nil
	}
}

func (g *Guard) replay(rec *record.Record) (types.Result, error) {
	res, err := parseResult("", rec.Result)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("recorded result of %s: %v", rec.Attachment, err), "")
	}
	return convertResult(res, g.cfg.CNIVersion)
}

// podIdentity checks the pod fields ADD records: a record is read back
// as input, and one whose pod fields CNI_ARGS could not carry would be
// taken for damaged. (DEL does not refuse them: it must be able to
// release whatever an older version recorded.)
func podIdentity(args cniargs.Args) error {
	for _, key := range []string{cniargs.PodNamespace, cniargs.PodName, cniargs.PodUID} {
		if err := record.ValidateArgValue(args.Get(key)); err != nil {
			return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS %s: %v", key, err), "")
		}
	}
	return nil
}
