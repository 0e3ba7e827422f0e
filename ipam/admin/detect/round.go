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
	// Unannotated: Calico's datastore is etcd (detect.Evidence).
	Unannotated bool
	// Settle is how long a round waits before its second look at what it
	// suspects (detect.Confirm); 0: no second look, every finding kept.
	Settle  time.Duration
	Metrics *Metrics
	Log     *slog.Logger
}

// Round reads the pods and Calico's allocations, judges them (a listing
// that fails makes its kinds unknown, never clean), looks again a settle
// time later at what it suspects, and reports each finding as a log line
// and Events, and the round as metrics. gone is the memory of earlier
// rounds. It reports; it never releases.
func Round(ctx context.Context, s Sources, gone *detect.Gone) detect.Report {
	now := time.Now()
	ev, r := s.look(ctx, now, gone)
	ev.Allocs = nil // judged: only the pods are needed on, for the Events
	if r.Suspects() && s.Settle > 0 {
		s.Log.Info("a second look at the findings once they had time to settle", "settle", s.Settle)
		select {
		case <-time.After(s.Settle):
		case <-ctx.Done():
		}
		_, again := s.look(ctx, time.Now(), nil)
		r = detect.Confirm(r, again)
	}
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

// look reads both listings once and judges them.
func (s Sources) look(ctx context.Context, now time.Time, gone *detect.Gone) (detect.Evidence, detect.Report) {
	ev := detect.Evidence{Now: now, LeakGrace: s.LeakGrace, Unannotated: s.Unannotated}
	pods, err := ReadPods(ctx, s.Kube, s.Page)
	if err != nil {
		s.Log.Error("the pods could not be read: every kind unknown this round", "error", err)
	} else {
		ev.Pods, ev.PodsComplete = pods, true
	}
	allocs, err := s.Allocations(ctx)
	if err != nil {
		s.Log.Error("Calico's allocations could not be read: early-release and gone-owner unknown this round", "error", err)
	} else {
		ev.Allocs, ev.AllocsComplete = allocs, true
	}
	return ev, detect.Check(ev, gone)
}
