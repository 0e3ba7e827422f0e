package admin

import (
	"flag"
	"fmt"
	"net"
	"path/filepath"
)

// MetricsAddr is --metrics-addr, for the commands that keep running (the
// watch, gc --every): where they serve Prometheus metrics and /healthz.
type MetricsAddr struct {
	Addr string
	// ProbeSocket is --probe-socket: the Unix socket the probes ask.
	ProbeSocket string
}

// Register implements Group.
func (m *MetricsAddr) Register(fs *flag.FlagSet) {
	fs.StringVar(&m.Addr, "metrics-addr", "", "while it keeps running: serve Prometheus metrics at http://`ADDR`/metrics and liveness at /healthz (the watch: its readiness verdict at /readyz too) (e.g. 127.0.0.1:9253, as the DaemonSet does; :9253 is every address of the host; default: none)")
	fs.StringVar(&m.ProbeSocket, "probe-socket", "", "with --metrics-addr: serve /healthz (the watch: /readyz too) on a Unix socket at `PATH` as well, which only this pod's processes reach (an emptyDir); the probes (doctor --alive-from, --ready-from unix:PATH) ask there, so no connection flood on --metrics-addr keeps them out (e.g. /run/safe-ipam/<container>.sock)")
}

// Resolve implements Group: an address must name a port.
func (m *MetricsAddr) Resolve(*Command) error {
	if m.ProbeSocket != "" && (m.Addr == "" || !filepath.IsAbs(m.ProbeSocket)) {
		return fmt.Errorf("--probe-socket %q: want an absolute path, with --metrics-addr", m.ProbeSocket)
	}
	if m.Addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(m.Addr); err != nil {
		return fmt.Errorf("--metrics-addr %q: want host:port or :port, e.g. 127.0.0.1:9253", m.Addr)
	}
	return nil
}
