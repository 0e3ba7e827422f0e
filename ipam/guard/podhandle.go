package guard

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
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
func (g *Guard) releasePodHandle(ctx context.Context, rec *record.Record, env Env) {
	if rec == nil || rec.PodNamespace == "" || rec.Handle != rec.PodNamespace+"."+rec.PodName {
		return
	}
	if why := g.podHandleProvenOwn(ctx, rec); why != "" {
		g.log.Warn("DEL leaves the adopted pod-name handle allocated", "attachment", rec.Attachment.String(), "handle", rec.Handle, "why", why)
		return
	}
	// With the pod's identity, calico-ipam releases the pod-name handle too.
	call := delegate.Call{ContainerID: rec.ContainerID, IfName: rec.IfName, Path: env.Path,
		Args: "IgnoreUnknown=1;" + cniargs.PodNamespace + "=" + rec.PodNamespace + ";" + cniargs.PodName + "=" + rec.PodName}
	if err := g.delegate.Run(ctx, "DEL", g.cfg.DelegateConfig(g.version, nil), call); err != nil {
		g.log.Warn("DEL could not release the adopted pod-name handle", "attachment", rec.Attachment.String(), "handle", rec.Handle, "error", err)
		return
	}
	g.log.Info("DEL released the adopted pod-name handle, which held only this attachment's addresses", "attachment", rec.Attachment.String(), "handle", rec.Handle)
}

// podHandleProvenOwn reads the handle and its blocks from Calico's etcd
// and says why they do not prove the handle holds only rec's addresses,
// or "".
func (g *Guard) podHandleProvenOwn(ctx context.Context, rec *record.Record) string {
	cli, err := g.calicoEtcd(ctx)
	if err != nil {
		return err.Error()
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var h calico.Handle
	rev, err := calico.ReadJSON(ctx, cli, calico.HandleKey(rec.Handle), &h)
	if err != nil || rev == 0 {
		return fmt.Sprintf("reading handle %s: %v (revision %d)", rec.Handle, err, rev)
	}
	own := map[netip.Addr]bool{}
	for _, ip := range rec.IPs {
		if a, ok := record.ParseAddr(ip); ok {
			own[a] = true
		}
	}
	for cidr := range h.Block {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return fmt.Sprintf("handle %s names block %q", rec.Handle, cidr)
		}
		var b calico.Block
		if _, err := calico.ReadJSON(ctx, cli, calico.BlockKey(p), &b); err != nil {
			return fmt.Sprintf("reading block %s: %v", p, err)
		}
		for _, ord := range b.OrdinalsOf(rec.Handle) {
			ip, err := b.IP(ord)
			if err != nil || !own[ip] {
				return fmt.Sprintf("handle %s also holds %s, which is not this attachment's", rec.Handle, ip)
			}
		}
	}
	if len(h.Block) == 0 || len(own) == 0 {
		return "nothing to compare"
	}
	return ""
}
