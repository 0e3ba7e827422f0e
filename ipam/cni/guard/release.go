package guard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/safe-ipam/safe-ipam/ipam/cni/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// The verbs' releases, and the commands' over them (gc, repair,
// uninstall), are in this file. ADD's forgetting of a gone holder
// (deadholder.go, renamed.go) and a DEL that cannot write its mark
// (unmarked.go) sit with their cases. Each asks the rulebook first.

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

// release runs the delegate DEL for att without pod identity, so the
// delegate frees only the container's own handles.
func (g *Guard) release(ctx context.Context, att record.Attachment, env delegate.Env, args cniargs.Args, prevResult []byte) error {
	conf := g.cfg.DelegateConfig(g.version, prevResult)
	// chaos:del-passes-pod-identity (a mutant breaks what follows)
	call := delegate.Env{ContainerID: att.ContainerID, NetNS: env.NetNS, IfName: att.IfName, Args: args.WithoutPodIdentity().String(), Path: env.Path}
	if err := g.delegate.Run(ctx, "DEL", conf, call); err != nil {
		return fmt.Errorf("releasing %s in %s: %w", att, g.delegate.Type, err)
	}
	return nil
}

// releaseWithVM releases att by container and, for marked, a VM's
// record, releases it with the pod's identity too (releaseVM). The two
// delegate DELs run at once: they release different handles (the
// container's own; the VM's, which calico-ipam's VM branch never takes
// from the container's), calico-ipam orders their writes under its
// host-wide IPAM lock and Calico's own compare-and-swap, and each is
// mostly one exec of calico-ipam, which a VM pod's DEL paid twice in a
// row (issue 35). Both are waited for; the release by container's error
// comes first, as when it ran first. A DEL that fails is retried whole,
// and each release is as safe to repeat as it was alone.
func (g *Guard) releaseWithVM(ctx context.Context, att record.Attachment, marked *record.Record, env delegate.Env, args cniargs.Args, prev []byte) error {
	if !releasesVM(marked) {
		return g.release(ctx, att, env, args, prev)
	}
	vm := make(chan error, 1)
	go func() { vm <- g.releaseVM(ctx, marked, env, args) }()
	err := g.release(ctx, att, env, args, prev)
	if vmErr := <-vm; err == nil {
		err = vmErr
	}
	return err
}

// releasesVM says whether rec is released with its pod's identity too:
// a record under a VM's handle that names its pod.
func releasesVM(rec *record.Record) bool {
	return rec != nil && record.SharedHandle(rec.Network, rec.Handle) && rec.PodName != ""
}

// releaseVM runs the delegate DEL of a VM's record with the pod's
// identity, beside the release by container: calico-ipam clears this
// pod's owner attributes (under its preconditions, so a late DEL of an
// old pod leaves the VM's next pod alone) and frees the VM's addresses
// once the VM is being deleted and no pod owns them.
func (g *Guard) releaseVM(ctx context.Context, rec *record.Record, env delegate.Env, args cniargs.Args) error {
	if !releasesVM(rec) {
		return nil
	}
	args = args.With(cniargs.PodNamespace, rec.PodNamespace).With(cniargs.PodName, rec.PodName)
	if rec.PodUID != "" {
		args = args.With(cniargs.PodUID, rec.PodUID)
	}
	if args.Get("IgnoreUnknown") == "" {
		args = args.With("IgnoreUnknown", "1")
	}
	call := delegate.Env{ContainerID: rec.ContainerID, NetNS: env.NetNS, IfName: rec.IfName, Args: args.String(), Path: env.Path}
	if err := g.delegate.Run(ctx, "DEL", g.cfg.DelegateConfig(g.version, nil), call); err != nil {
		return fmt.Errorf("releasing %s from VM handle %s in %s: %w", rec.Attachment, rec.Handle, g.delegate.Type, err)
	}
	g.log.Info("DEL passed the pod's identity for the VM's handle", "attachment", rec.Attachment.String(), "handle", rec.Handle)
	return nil
}

// releaseQuarantinedVM runs calico-ipam's VM branch for q, a VM pod's
// quarantined allocation, once its holder is released: with the pod's
// identity calico-ipam clears that pod's owner attributes and frees the
// VM's handle if the VM is being deleted and no pod owns it, as the
// pod's own DEL (answered from the quarantine) would have with Calico
// alone. It never fails the holder's release, which must not wait on
// another pod: what it leaves (calico-ipam finds the pod gone, or the
// handle released from outside) the audit reports as a leak candidate.
func (g *Guard) releaseQuarantinedVM(ctx context.Context, q record.Quarantine, env delegate.Env) {
	rec := &record.Record{Attachment: q.Attachment, Node: q.Node, Handle: q.Handle, PodNamespace: q.PodNamespace, PodName: q.PodName, PodUID: q.PodUID}
	if err := g.releaseVM(ctx, rec, delegate.Env{Path: env.Path}, cniargs.Args{}); err != nil {
		g.log.Warn("could not release a quarantined VM pod's allocation with the pod's identity; the audit reports the VM handle", "quarantined", q.Attachment.String(), "handle", q.Handle, "error", err)
	}
}

// releaseQuarantines releases, with the record that held their addresses,
// the allocations quarantined for it: each under its own attachment's
// handles, without pod identity, and a VM pod's also with the pod's
// identity (releaseQuarantinedVM). It forgets them a batch at a time, so a
// DEL cut short (by its deadline, a crash) keeps its progress and a
// holder with any number of quarantines is released in the end. It
// returns the holder as stored now.
func (g *Guard) releaseQuarantines(ctx context.Context, rec *record.Record, env delegate.Env) (*record.Record, error) {
	return g.settleQuarantines(ctx, rec, g.releaseQuarantine(env))
}

// releaseQuarantine is the fate of a quarantine whose holder is released:
// its allocation is freed through the delegate.
func (g *Guard) releaseQuarantine(env delegate.Env) QuarantineFate {
	return func(ctx context.Context, holder *record.Record, q record.Quarantine) error {
		if err := g.release(ctx, q.Attachment, delegate.Env{Path: env.Path}, cniargs.Args{}, nil); err != nil {
			return fmt.Errorf("releasing the quarantine of %s held for %s: %w", q.Attachment, holder.Attachment, err)
		}
		g.releaseQuarantinedVM(ctx, q, env)
		g.log.Info("released a quarantine with its holder", "holder", holder.Attachment.String(), "quarantined", q.Attachment.String(), "ips", q.IPs)
		return nil
	}
}

// settleQuarantines gives each quarantine of rec its fate and forgets
// it, a batch at a time.
func (g *Guard) settleQuarantines(ctx context.Context, rec *record.Record, fate QuarantineFate) (*record.Record, error) {
	if rec == nil {
		return nil, nil
	}
	for batch := range slices.Chunk(slices.Clone(rec.Quarantined), quarantineBatch) {
		for _, q := range batch {
			if err := fate(ctx, rec, q); err != nil {
				return nil, err
			}
		}
		next, err := g.store.Unquarantine(ctx, rec, batch)
		if err != nil {
			return nil, storeError("forgetting the released quarantines of "+rec.Attachment.String(), err)
		}
		rec = next
	}
	return rec, nil
}

// releasePodHandle releases the namespace.podname handle of an adopted
// record (one written for a pod that ran before safe-ipam), but only when
// Calico's data, read now, proves that the handle holds nothing but this
// record's allocations: any DEL by pod name frees every address under it,
// and another incarnation of the pod (on another node, or handed the same
// address again) may hold one under the same name. An address alone is no
// proof: see podHandleProvenOwn. Otherwise the handle stays allocated,
// which is what Calico alone leaves when no DEL comes, and the audit
// reports it as a pod-name-handle. It never fails the verb.
//
// own says what the caller's own evidence is: a DEL is the runtime's word
// for this very container, so an allocation without owner attributes
// (Calico 2.x wrote none) may be judged by its address; a collection acts
// on its own judgment and needs Calico's owner attributes to name the
// record's pod on the record's node.
func (g *Guard) releasePodHandle(ctx context.Context, rec *record.Record, env delegate.Env, own evidence) {
	if rec == nil || rec.PodNamespace == "" || rec.Handle != rec.PodNamespace+"."+rec.PodName {
		return
	}
	// chaos:dead-node-releases-pod-handle (a mutant breaks what follows)
	if g.deadNode {
		// kube-controllers freed the dead node's allocations with its Node;
		// whatever the handle holds now is another incarnation's.
		g.log.Warn("GC leaves the pod-name handle of a dead node's record to Calico", "attachment", rec.Attachment.String(), "handle", rec.Handle, "node", g.node)
		return
	}
	if why := g.podHandleProvenOwn(ctx, rec, own); why != "" {
		g.log.Warn("leaving the adopted pod-name handle allocated", "attachment", rec.Attachment.String(), "handle", rec.Handle, "why", why)
		return
	}
	// With the pod's identity, calico-ipam releases the pod-name handle too.
	call := delegate.Env{ContainerID: rec.ContainerID, IfName: rec.IfName, Path: env.Path,
		Args: "IgnoreUnknown=1;" + cniargs.PodNamespace + "=" + rec.PodNamespace + ";" + cniargs.PodName + "=" + rec.PodName}
	if err := g.delegate.Run(ctx, "DEL", g.cfg.DelegateConfig(g.version, nil), call); err != nil {
		g.log.Warn("could not release the adopted pod-name handle", "attachment", rec.Attachment.String(), "handle", rec.Handle, "error", err)
		return
	}
	g.log.Info("released the adopted pod-name handle, which held only this attachment's addresses", "attachment", rec.Attachment.String(), "handle", rec.Handle)
}

// evidence is what a caller of releasePodHandle knows besides Calico's
// data.
type evidence int

const (
	// runtimeDEL: the runtime's DEL of this container.
	runtimeDEL evidence = iota
	// ownJudgment: a collection (GC, gc, repair), which no runtime asked
	// for this container.
	ownJudgment
)

// podHandleProvenOwn reads what Calico keeps under the handle and says why
// it does not prove the handle holds only rec's allocations, or "": every
// address under it is one of rec's, and every allocation's owner
// attributes name rec's pod on rec's node. Attributes that name no owner
// (Calico 2.x) prove nothing for a collection; for a runtime DEL the
// addresses decide.
func (g *Guard) podHandleProvenOwn(ctx context.Context, rec *record.Record, own evidence) string {
	held, err := g.calico.HandleAllocations(ctx, rec.Handle)
	if err != nil {
		return err.Error()
	}
	mine := map[netip.Addr]bool{}
	for _, ip := range rec.IPs {
		if a, ok := record.ParseAddr(ip); ok {
			mine[a] = true
		}
	}
	addrs := slices.SortedFunc(maps.Keys(held), netip.Addr.Compare)
	for _, ip := range addrs {
		if !mine[ip] {
			return fmt.Sprintf("handle %s also holds %s, which is not this attachment's", rec.Handle, ip)
		}
		if why := rulebook.PodHandleOwner(held[ip].Owner, rec, own == runtimeDEL); why != "" {
			return fmt.Sprintf("handle %s holds %s, but %s", rec.Handle, ip, why)
		}
	}
	if len(held) == 0 || len(mine) == 0 {
		return "nothing to compare"
	}
	return ""
}
