package detect

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// Sources are what one round reads, and where it reports.
type Sources struct {
	// Kube lists the pods, and takes the Events.
	Kube kubernetes.Interface
	// Allocations reads Calico's allocations whole, or fails.
	Allocations func(ctx context.Context) ([]detect.Allocation, error)
	Page        int64
	LeakGrace   time.Duration
	Metrics     *Metrics
	Log         *slog.Logger
	// afterRound, when set, is called once a round is done (the loop's
	// heartbeat).
	afterRound func()
}

// Round reads the pods and Calico's allocations, judges them (a listing
// that fails makes its kinds unknown, never clean), and reports each
// finding as a log line and Events, and the round as metrics. gone is the
// memory of earlier rounds. It reports; it never releases.
func Round(ctx context.Context, s Sources, gone detect.Gone) detect.Report {
	now := time.Now()
	ev := detect.Evidence{Now: now, LeakGrace: s.LeakGrace}
	pods, err := ReadPods(ctx, s.Kube, s.Page)
	if err != nil {
		s.Log.Error("the pods could not be read: every kind unknown this round", "error", err)
	} else {
		ev.Pods, ev.PodsComplete = pods, true
	}
	allocs, err := s.Allocations(ctx)
	if err != nil {
		s.Log.Error("Calico's allocations could not be read: gone-owner unknown this round", "error", err)
	} else {
		ev.Allocs, ev.AllocsComplete = allocs, true
	}
	r := detect.Check(ev, gone)
	for _, f := range r.Findings {
		s.Log.Warn("finding", "kind", string(f.Kind), "address", f.Address.String(), "pods", f.Pods, "nodes", f.Nodes, "why", f.Why)
	}
	for _, k := range detect.Kinds {
		if why := r.Unknown[k]; why != "" {
			s.Log.Warn("unknown", "kind", string(k), "why", why)
		}
	}
	if err := Post(ctx, s.Kube, EventsFor(r, ev.Pods), now); err != nil {
		s.Log.Error("posting the findings' Events", "error", err)
	}
	if s.Metrics != nil {
		s.Metrics.Observe(r)
	}
	return r
}
