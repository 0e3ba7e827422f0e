// Package metrics is what the DaemonSet's long-running containers tell
// Prometheus, each on its own --metrics-addr: the watch (install --watch)
// whether the node is protected, its records and quarantines, and how
// often it put safe-ipam back and for how long the node was unprotected;
// gc its rounds and what they released. Each also answers /healthz, the
// container's liveness probe. Only the admin binary links it: the CNI
// binary, run on every pod start, keeps no state across calls.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "safe_ipam"

// Watch are the watch container's metrics.
type Watch struct {
	// Protected is doctor's verdict, 1 or 0, at the last check.
	Protected prometheus.Gauge
	// Records and Quarantines are this node's, by network, at the last
	// check.
	Records, Quarantines *prometheus.GaugeVec
	// LastCheck is when the last check finished (Unix seconds).
	LastCheck prometheus.Gauge
	// FullChecks counts the full checks, those that read the record
	// store and Calico's datastore.
	FullChecks prometheus.Counter
	// Reinstalls counts the times the watch put safe-ipam back after
	// calico-node's installer (or anyone) undid it; Unprotected is how
	// long the node was unprotected each time, as the watch measured it.
	Reinstalls  prometheus.Counter
	Unprotected prometheus.Histogram
}

// NewWatch registers the watch's metrics in reg.
func NewWatch(reg prometheus.Registerer) *Watch {
	w := &Watch{
		Protected: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "protected",
			Help: "1 when safe-ipam doctor says this node is protected, else 0, at the last check."}),
		Records: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "records",
			Help: "safe-ipam's records of this node, by network, at the last check."}, []string{"network"}),
		Quarantines: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "quarantines",
			Help: "Allocations fenced off because a running attachment holds their address (each an ADD that was refused), held with this node's records, by network."}, []string{"network"}),
		LastCheck: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "last_check_timestamp_seconds",
			Help: "When the watch last finished checking the node (Unix time)."}),
		FullChecks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "full_checks_total",
			Help: "Full checks the watch started: those that read the record store and Calico's datastore (the others read the node's own files)."}),
		Reinstalls: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "reinstalls_total",
			Help: "Times the watch put safe-ipam back after the node's CNI dirs undid it (calico-node's installer does on every start)."}),
		Unprotected: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "unprotected_seconds",
			Help:    "How long the node was unprotected before each re-install, from the change the watch saw to safe-ipam back in place.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}}),
	}
	reg.MustRegister(w.Protected, w.Records, w.Quarantines, w.LastCheck, w.FullChecks, w.Reinstalls, w.Unprotected)
	return w
}

// GC are the gc container's metrics.
type GC struct {
	// Rounds counts gc rounds by result: "ok" or "error".
	Rounds *prometheus.CounterVec
	// Released counts the records released (with their addresses).
	Released prometheus.Counter
	// Stale is what the last round found to release and did not (a dry
	// run, or a release that failed).
	Stale prometheus.Gauge
	// SweepRefused is 1 while the last dead-node sweep was refused
	// (rulebook.TrustNodes), else 0.
	SweepRefused prometheus.Gauge
	// LastSuccess is when a round last succeeded (Unix seconds).
	LastSuccess prometheus.Gauge
	// SweepLeader is 1 for the node this pod last found leading the
	// dead-node sweeps (none while nobody leads).
	SweepLeader *prometheus.GaugeVec
	// LastSweep is when this pod last swept (Unix seconds), and
	// LastSweepOK whether that sweep succeeded (1) or failed (0).
	LastSweep, LastSweepOK prometheus.Gauge
	// SweepReleased counts the records this pod's sweeps released.
	SweepReleased prometheus.Counter
}

// NewGC registers gc's metrics in reg.
func NewGC(reg prometheus.Registerer) *GC {
	g := &GC{
		Rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "gc", Name: "rounds_total",
			Help: "gc rounds, by result (ok, error)."}, []string{"result"}),
		Released: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "gc", Name: "released_total",
			Help: "Records gc released with their addresses: sandboxes the runtime no longer lists, and records of nodes Calico no longer knows."}),
		Stale: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "gc", Name: "stale_records",
			Help: "Records the last round found to release and did not (a dry run, or a failed release)."}),
		LastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "gc", Name: "last_success_timestamp_seconds",
			Help: "When a gc round last succeeded (Unix time)."}),
		SweepRefused: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "gc", Name: "dead_node_sweep_refused",
			Help: "1 when this node's last dead-node sweep released nothing because Calico's Nodes listing was not trusted (it lacked this node, or too large a share of the nodes known at once), else 0; kept while another node leads the sweeps."}),
	}
	g.SweepLeader = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "gc", Name: "dead_node_sweep_leader",
		Help: "1 for the node this pod last found leading the dead-node sweeps of its network (none while nobody leads)."}, []string{"node"})
	g.LastSweep = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "gc", Name: "dead_node_sweep_last_timestamp_seconds",
		Help: "When this pod last swept other nodes' records (Unix time); only the leader sweeps."})
	g.LastSweepOK = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "gc", Name: "dead_node_sweep_last_success",
		Help: "1 when this pod's last dead-node sweep succeeded, 0 when it failed."})
	g.SweepReleased = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "gc", Name: "dead_node_sweep_released_total",
		Help: "Records of nodes Calico no longer knows that this pod's sweeps released (also counted in released_total)."})
	reg.MustRegister(g.Rounds, g.Released, g.Stale, g.LastSuccess, g.SweepRefused, g.SweepLeader, g.LastSweep, g.LastSweepOK, g.SweepReleased)
	return g
}

// ListenProbes binds addr at once (so that a taken port fails the
// command, not a probe later) and serves reg at /metrics and alive at
// /healthz (200, or 503 with alive's error) until ctx ends, and ready at
// /readyz unless it is nil: a verdict kept in memory, which the readiness
// probe reads without the process asking anything of anyone. With socket, the probes (not the
// metrics) are served on a Unix socket at that path as well: every local
// process reaches the loopback port, and a flood of connections there
// sheds the probe's along with the rest; the socket, in the container's
// own filesystem, only the pod's processes reach.
//
// The returned wait, called once ctx has ended, waits until both are shut
// down, the probe socket removed with its listener.
func ListenProbes(ctx context.Context, addr, socket string, reg *prometheus.Registry, alive, ready func() error) (bound net.Addr, wait func(), err error) {
	probes := http.NewServeMux()
	probes.HandleFunc("/healthz", probe(alive, "ok"))
	if ready != nil {
		probes.HandleFunc("/readyz", probe(ready, "ready"))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	var done []<-chan struct{}
	if socket != "" {
		sock, err := listenSocket(socket)
		if err != nil {
			ln.Close()
			return nil, nil, err
		}
		done = append(done, serve(ctx, sock, probes))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", probes)
	done = append(done, serve(ctx, ln, mux))
	return ln.Addr(), func() {
		for _, d := range done {
			<-d
		}
	}, nil
}

// ProbeClient is a client of the probes served at addr (host:port, or
// unix:PATH, as unix:///PATH too, for a probe socket), and the URL to put
// their paths after.
func ProbeClient(addr string, timeout time.Duration) (*http.Client, string) {
	socket, ok := strings.CutPrefix(addr, "unix://")
	if !ok {
		socket, ok = strings.CutPrefix(addr, "unix:")
	}
	if !ok {
		return &http.Client{Timeout: timeout}, "http://" + addr
	}
	dial := &net.Dialer{}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dial.DialContext(ctx, "unix", socket)
	}}}, "http://probe-socket"
}

// listenSocket listens on a Unix socket at path, in a directory it makes
// (0700) if missing, replacing a socket an earlier run left there but
// nothing else.
func listenSocket(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("--probe-socket %s: %w", path, err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("--probe-socket %s: something other than a socket is there (mode %s); safe-ipam replaces only a socket an earlier run left", path, st.Mode())
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("--probe-socket %s: another process serves it", path)
		}
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--probe-socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--probe-socket %s: %w", path, err)
	}
	return ln, nil
}

// serve serves h on ln until ctx ends, with every timeout and a header
// cap: the endpoint answers scrapes and probes, and nobody else may keep
// it busy. The channel closes once it is shut down.
func serve(ctx context.Context, ln net.Listener, h http.Handler) <-chan struct{} {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 8 << 10,
		ConnState: newConnLimit(MaxConns).track}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		_ = ln.Close() // a listener Serve never took, or one it dropped
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return done
}

// probe answers 200 and ok while check passes, else 503 and its error.
func probe(check func() error, ok string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if err := check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, ok)
	}
}

// Heartbeat is a liveness check: alive while Beat was called within
// Within.
type Heartbeat struct {
	Within time.Duration
	last   atomic.Int64 // Unix nanoseconds
}

// NewHeartbeat starts alive, as of now.
func NewHeartbeat(within time.Duration) *Heartbeat {
	h := &Heartbeat{Within: within}
	h.Beat()
	return h
}

// Beat records that the loop went round.
func (h *Heartbeat) Beat() { h.last.Store(time.Now().UnixNano()) }

// Alive says whether the loop went round within Within.
func (h *Heartbeat) Alive() error {
	if since := time.Since(time.Unix(0, h.last.Load())); since > h.Within {
		return fmt.Errorf("the loop last went round %s ago (more than %s)", since.Round(time.Second), h.Within)
	}
	return nil
}
