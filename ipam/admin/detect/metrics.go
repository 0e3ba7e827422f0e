package detect

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// Metrics are the check's findings as Prometheus sees them: each kind's
// count in the last round, and whether the round could judge it (an
// alert on a kind must also fire while it is unknown: unknown is never
// clean).
type Metrics struct {
	Findings *prometheus.GaugeVec
	Unknown  *prometheus.GaugeVec
	Rounds   *prometheus.CounterVec
	// LastRound is when a round last finished with every kind known.
	LastRound prometheus.Gauge
}

// NewMetrics registers the check's metrics in reg, every kind at 0 and
// unknown until the first round.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "safe_ipam", Subsystem: "detect", Name: "findings",
			Help: "Findings of the last round of the continuous check that judged the kind, by kind (shared-address, annotation-mismatch, early-release, gone-owner)."}, []string{"kind"}),
		Unknown: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "safe_ipam", Subsystem: "detect", Name: "unknown",
			Help: "1 for a kind the last round could not judge (a listing it could not read whole), else 0."}, []string{"kind"}),
		Rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "safe_ipam", Subsystem: "detect", Name: "rounds_total",
			Help: "Rounds of the continuous check, by result (ok: every kind judged, but gone-owner while its memory is younger than the leak grace; unknown: some could not be)."}, []string{"result"}),
		LastRound: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "safe_ipam", Subsystem: "detect", Name: "last_success_timestamp_seconds",
			Help: "When a round of the continuous check last ended ok (Unix time)."}),
	}
	for _, k := range detect.Kinds {
		m.Unknown.WithLabelValues(string(k)).Set(1)
		m.Findings.WithLabelValues(string(k)).Set(0)
	}
	reg.MustRegister(m.Findings, m.Unknown, m.Rounds, m.LastRound)
	return m
}

// Unregister takes the metrics off reg: an instance that no longer runs
// the rounds serves none.
func (m *Metrics) Unregister(reg prometheus.Registerer) {
	for _, c := range []prometheus.Collector{m.Findings, m.Unknown, m.Rounds, m.LastRound} {
		reg.Unregister(c)
	}
}

// Observe keeps a round's report. A kind the round could not judge keeps
// its last count (an alert on it neither resolves nor fires on a round
// that knows nothing), and is unknown.
func (m *Metrics) Observe(r detect.Report) {
	result := "ok"
	for _, k := range detect.Kinds {
		n, known := r.Count(k)
		if slices.Contains(r.NotApplicable, k) {
			m.Findings.DeleteLabelValues(string(k))
			m.Unknown.DeleteLabelValues(string(k))
			continue
		}
		if known {
			m.Findings.WithLabelValues(string(k)).Set(float64(n))
			m.Unknown.WithLabelValues(string(k)).Set(0)
			continue
		}
		m.Unknown.WithLabelValues(string(k)).Set(1)
		if !(k == detect.GoneOwner && r.Warming) {
			result = "unknown"
		}
	}
	m.Rounds.WithLabelValues(result).Inc()
	if result == "ok" {
		m.LastRound.SetToCurrentTime()
	}
}
