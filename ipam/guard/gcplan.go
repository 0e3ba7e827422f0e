package guard

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/record"
)

// GC from outside the runtime (safe-ipam gc): behind Calico's main plugin
// (CNI 1.0.0 at most) or under containerd 1.6, no CNI GC ever reaches
// safe-ipam, so records whose DEL never came would stay forever. The
// admin command lists this node's records, then reads a liveness source,
// and releases what the source positively does not list, exactly as the
// GC verb does: mark, delegate DEL, forget.

// GCPlan is what a GC would do with this node's records of the network.
type GCPlan struct {
	// Records is how many records of this node the plan judged.
	Records int
	Release []*record.Record
	Keep    []GCKept
	valid   map[[2]string]bool
}

// GCKept is a record GC leaves alone, and why.
type GCKept struct {
	Record *record.Record
	Why    string
}

// OpenGC opens a Guard on a node's CNI config file for safe-ipam gc: its
// network, its records on this node, and the delegate found in cniPath,
// as the runtime would run the plugin.
func OpenGC(ctx context.Context, file *config.File, cniPath string, log *slog.Logger) (*Guard, error) {
	if file.SafeIPAM == nil {
		return nil, fmt.Errorf("CNI config %s: its IPAM is not safe-ipam", file.Path)
	}
	// The file no longer tells whether the store's TLS files came from
	// ipam.store or Calico's keys; an error names both.
	in := " in " + file.Path
	settings := tlsSettings{cert: "ipam.store.certFile or etcd_cert_file" + in, key: "ipam.store.keyFile or etcd_key_file" + in, ca: "ipam.store.caFile or etcd_ca_cert_file" + in}
	g, err := open(ctx, VerbGC, file.SafeIPAM, settings, Env{Path: cniPath}, log)
	if err != nil {
		return nil, err
	}
	// A record written moments ago may belong to a sandbox whose
	// RunPodSandbox has not returned, which no runtime lists yet.
	g.gcKeep, g.gcPath = g.tooYoung, cniPath
	return g, nil
}

// Node is the node whose records the Guard lists, named as Calico names it.
func (g *Guard) Node() string { return g.node }

// Network is the CNI network of the Guard's config.
func (g *Guard) Network() string { return g.cfg.Network }

// ListForGC lists this node's records of the network. List them before
// reading what runs: a sandbox that becomes ready in between is then
// listed by the source, not mistaken for garbage.
func (g *Guard) ListForGC(ctx context.Context) ([]*record.Record, error) {
	recs, err := g.store.List(ctx, g.cfg.Network)
	if err != nil {
		return nil, storeError("listing records of "+g.cfg.Network, err)
	}
	return recs, nil
}

// PlanGC judges records as the GC verb does: a record runs if listed says
// its attachment runs; a pending record is an ADD in flight while young or
// while its process runs; and with OpenGC any record younger than
// gcGracePeriod is kept.
func (g *Guard) PlanGC(recs []*record.Record, listed func(containerID, ifname string) bool) *GCPlan {
	p := &GCPlan{Records: len(recs), valid: map[[2]string]bool{}}
	for _, rec := range recs {
		if listed(rec.ContainerID, rec.IfName) {
			p.valid[[2]string{rec.ContainerID, rec.IfName}] = true
		}
		if why := g.keepWhy(rec, p.valid); why != "" {
			p.Keep = append(p.Keep, GCKept{Record: rec, Why: why})
			continue
		}
		p.Release = append(p.Release, rec)
	}
	return p
}

// keepWhy says why GC keeps rec, or "". The store lists this node's
// records only, as the runtime's list names this node's attachments only.
func (g *Guard) keepWhy(rec *record.Record, valid map[[2]string]bool) string {
	switch {
	case valid[[2]string{rec.ContainerID, rec.IfName}]:
		return "listed as running"
	// A pending record is an ADD in flight, not garbage, while its process
	// runs or while it is young.
	case rec.State == record.Pending && rec.Owner.Alive():
		return "pending: the ADD that wrote it still runs"
	case rec.State == record.Pending && g.now().Sub(rec.Created) < g.cfg.GCGracePeriod:
		return fmt.Sprintf("pending for less than gcGracePeriod (%s): an ADD in flight", g.cfg.GCGracePeriod)
	case g.gcKeep != nil && g.gcKeep(rec):
		return fmt.Sprintf("written less than gcGracePeriod (%s) ago: its sandbox may not be listed yet", g.cfg.GCGracePeriod)
	}
	return ""
}

// ApplyGC releases the plan's records as the GC verb does, going on past
// errors and reporting them all. A record that changed since it was
// listed is judged again as it is now.
func (g *Guard) ApplyGC(ctx context.Context, p *GCPlan) error {
	return joinErrors("GC", g.applyGC(ctx, p, g.gcPath))
}

func (g *Guard) applyGC(ctx context.Context, p *GCPlan, cniPath string) []error {
	var errs []error
	for _, rec := range p.Release {
		if err := g.collect(ctx, rec, Env{Path: cniPath}, p.valid); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// tooYoung: written (created or last changed) less than gcGracePeriod ago.
func (g *Guard) tooYoung(rec *record.Record) bool {
	last := rec.Created
	if rec.Updated.After(last) {
		last = rec.Updated
	}
	return g.now().Sub(last) < g.cfg.GCGracePeriod
}
