package install

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/safe-ipam/safe-ipam/ipam/metrics"
)

// NodeCheck says whether the node is protected and, by network, how many
// records and quarantines it has (safe-ipam doctor's answer).
type NodeCheck func(ctx context.Context, n Node) (protected bool, stores []StoreCount, err error)

// StoreCount is one network's records and quarantines on the node.
type StoreCount struct {
	Network              string
	Records, Quarantines int
}

// CheckEvery is how often the watch asks doctor about the node for its
// metrics.
const CheckEvery = 30 * time.Second

// watchMetrics serves the watch's metrics at addr until ctx ends: every
// CheckEvery, doctor's verdict, records and quarantines; each
// re-assertion, through the returned func. /healthz fails once the checks
// stop coming round (a wedged process), not when the node is
// unprotected: that is the readiness probe's answer.
func watchMetrics(ctx context.Context, addr string, node Node, check NodeCheck, log *slog.Logger) (func(Reassertion), error) {
	reg := prometheus.NewRegistry()
	m := metrics.NewWatch(reg)
	beat := metrics.NewHeartbeat(3*CheckEvery + checkTimeout)
	bound, err := metrics.Listen(ctx, addr, reg, beat.Alive)
	if err != nil {
		return nil, err
	}
	log.Info("serving metrics", "addr", bound.String())
	go func() {
		for {
			checkNode(ctx, node, check, m)
			beat.Beat()
			select {
			case <-ctx.Done():
				return
			case <-time.After(CheckEvery):
			}
		}
	}()
	return func(r Reassertion) {
		m.Reinstalls.Inc()
		m.Unprotected.Observe(r.Window().Seconds())
	}, nil
}

// checkTimeout bounds one check: a store or datastore that does not
// answer makes doctor wait for its own timeouts.
const checkTimeout = 30 * time.Second

// checkNode sets the gauges from one check; without a check (or when it
// fails) the node counts as unprotected.
func checkNode(ctx context.Context, node Node, check NodeCheck, m *metrics.Watch) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	m.Records.Reset()
	m.Quarantines.Reset()
	protected, stores, err := false, []StoreCount(nil), error(nil)
	if check != nil {
		protected, stores, err = check(ctx, node)
	}
	if err != nil {
		protected, stores = false, nil
	}
	if protected {
		m.Protected.Set(1)
	} else {
		m.Protected.Set(0)
	}
	for _, s := range stores {
		m.Records.WithLabelValues(s.Network).Add(float64(s.Records))
		m.Quarantines.WithLabelValues(s.Network).Add(float64(s.Quarantines))
	}
	m.LastCheck.SetToCurrentTime()
}
