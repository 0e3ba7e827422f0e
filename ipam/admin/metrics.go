package admin

import (
	"flag"
	"fmt"
	"net"
)

// MetricsAddr is --metrics-addr, for the commands that keep running (the
// watch, gc --every): where they serve Prometheus metrics and /healthz.
type MetricsAddr struct {
	Addr string
}

// Register implements Group.
func (m *MetricsAddr) Register(fs *flag.FlagSet) {
	fs.StringVar(&m.Addr, "metrics-addr", "", "while it keeps running: serve Prometheus metrics at http://`ADDR`/metrics and liveness at /healthz (the watch: its readiness verdict at /readyz too) (e.g. :9253; default: none)")
}

// Resolve implements Group: an address must name a port.
func (m *MetricsAddr) Resolve(*Command) error {
	if m.Addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(m.Addr); err != nil {
		return fmt.Errorf("--metrics-addr %q: want host:port or :port, e.g. :9253", m.Addr)
	}
	return nil
}
