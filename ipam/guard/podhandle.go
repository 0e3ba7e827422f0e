package guard

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/safe-ipam/safe-ipam/ipam/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
)

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
