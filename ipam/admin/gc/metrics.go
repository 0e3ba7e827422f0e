package gc

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/metrics"
)

// serveMetrics serves gc's metrics at --metrics-addr while the loop runs;
// /healthz fails once rounds stop coming (a wedged process), not when a
// round fails: the next round tries again.
func (r *runner) serveMetrics(ctx context.Context) error {
	reg := prometheus.NewRegistry()
	m := metrics.NewGC(reg)
	beat := metrics.NewHeartbeat(2*r.every + r.out.Timeout)
	bound, wait, err := metrics.ListenProbes(ctx, r.metricsAddr.Addr, r.metricsAddr.ProbeSocket, reg, beat.Alive, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.stderr, "safe-ipam gc: serving metrics at %s\n", bound)
	r.metricsDone = wait
	r.observe = func(code int, t tally) {
		beat.Beat()
		m.Released.Add(float64(t.released))
		m.Stale.Set(float64(t.stale))
		if t.refused >= 0 { // kept from this node's last sweep while another leads
			m.SweepRefused.Set(float64(t.refused))
		}
		if t.leader != "" {
			m.SweepLeader.Reset()
			if t.leader != "-" {
				m.SweepLeader.WithLabelValues(t.leader).Set(1)
			}
		}
		if t.swept >= 0 {
			m.LastSweep.SetToCurrentTime()
			m.LastSweepOK.Set(float64(t.swept))
			m.SweepReleased.Add(float64(t.sweepReleased))
		}
		if code == admin.ExitError {
			m.Rounds.WithLabelValues("error").Inc()
			return
		}
		m.Rounds.WithLabelValues("ok").Inc()
		m.LastSuccess.SetToCurrentTime()
	}
	return nil
}
