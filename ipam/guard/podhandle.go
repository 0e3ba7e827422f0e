package guard

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/safe-ipam/safe-ipam/ipam/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/record"
)

// releasePodHandle releases the namespace.podname handle of an adopted
// record (one written for a pod that ran before safe-ipam), but only when
// Calico's data, read now, proves that the handle holds nothing but the
// record's addresses: any DEL by pod name frees every address under it,
// and another container of the same pod name may hold one. Otherwise the
// handle stays allocated and the audit reports it as a pod-name-handle.
// It never fails the DEL.
func (g *Guard) releasePodHandle(ctx context.Context, rec *record.Record, env delegate.Env) {
	if rec == nil || rec.PodNamespace == "" || rec.Handle != rec.PodNamespace+"."+rec.PodName {
		return
	}
	if why := g.podHandleProvenOwn(ctx, rec); why != "" {
		g.log.Warn("DEL leaves the adopted pod-name handle allocated", "attachment", rec.Attachment.String(), "handle", rec.Handle, "why", why)
		return
	}
	// With the pod's identity, calico-ipam releases the pod-name handle too.
	call := delegate.Env{ContainerID: rec.ContainerID, IfName: rec.IfName, Path: env.Path,
		Args: "IgnoreUnknown=1;" + cniargs.PodNamespace + "=" + rec.PodNamespace + ";" + cniargs.PodName + "=" + rec.PodName}
	if err := g.delegate.Run(ctx, "DEL", g.cfg.DelegateConfig(g.version, nil), call); err != nil {
		g.log.Warn("DEL could not release the adopted pod-name handle", "attachment", rec.Attachment.String(), "handle", rec.Handle, "error", err)
		return
	}
	g.log.Info("DEL released the adopted pod-name handle, which held only this attachment's addresses", "attachment", rec.Attachment.String(), "handle", rec.Handle)
}

// podHandleProvenOwn reads which addresses Calico keeps under the handle
// and says why they do not prove the handle holds only rec's addresses,
// or "".
func (g *Guard) podHandleProvenOwn(ctx context.Context, rec *record.Record) string {
	held, err := g.calico.HandleAddrs(ctx, rec.Handle)
	if err != nil {
		return err.Error()
	}
	own := map[netip.Addr]bool{}
	for _, ip := range rec.IPs {
		if a, ok := record.ParseAddr(ip); ok {
			own[a] = true
		}
	}
	for _, ip := range held {
		if !own[ip] {
			return fmt.Sprintf("handle %s also holds %s, which is not this attachment's", rec.Handle, ip)
		}
	}
	if len(held) == 0 || len(own) == 0 {
		return "nothing to compare"
	}
	return ""
}
