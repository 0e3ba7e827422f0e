package doctor

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/safe-ipam/safe-ipam/ipam/admin/metrics"
)

// The probes: --alive-from and --ready-from ask a watch's (or gc's)
// endpoint, at its loopback port or its probe socket, and exit 0 when it
// says yes, 3 when it says no, 2 when nothing answers.
func TestProbesAskTheEndpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	socket := filepath.Join(t.TempDir(), "watch.sock")
	addr, _, err := metrics.ListenProbes(ctx, "127.0.0.1:0", socket, prometheus.NewRegistry(),
		func() error { return nil }, func() error { return errors.New("not protected: calico-ipam is Calico's") })
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"--alive-from", "unix:" + socket}, ExitProtected},
		{[]string{"--alive-from", "unix://" + socket}, ExitProtected},
		{[]string{"--alive-from", addr.String()}, ExitProtected},
		{[]string{"--ready-from", "unix:" + socket}, ExitBroken},
		{[]string{"--ready-from", addr.String()}, ExitBroken},
		{[]string{"--ready-from", "unix:" + socket + ".gone"}, ExitError},
		{[]string{"--ready-from", "unix:" + socket, "--alive-from", "unix:" + socket}, ExitError},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if got := Run(append(tt.args, "--timeout", "2s"), &stdout, &stderr); got != tt.want {
			t.Errorf("doctor %v = %d; want %d (stdout %q, stderr %q)", tt.args, got, tt.want, stdout.String(), stderr.String())
		}
	}
}
