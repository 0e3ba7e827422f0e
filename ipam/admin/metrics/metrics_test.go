package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /metrics serves the registry; /healthz follows the heartbeat: 503 once
// the loop stops coming round.
func TestListen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	w := NewWatch(reg)
	g := NewGC(reg)
	w.Protected.Set(1)
	w.Reinstalls.Inc()
	g.Released.Add(3)
	beat := NewHeartbeat(200 * time.Millisecond)
	addr, _, err := ListenProbes(ctx, "127.0.0.1:0", "", reg, beat.Alive, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr.String()
	_, body := get(t, base+"/metrics")
	for _, want := range []string{"safe_ipam_protected 1", "safe_ipam_reinstalls_total 1", "safe_ipam_gc_released_total 3", "safe_ipam_unprotected_seconds_count 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d while beating", code)
	}
	time.Sleep(300 * time.Millisecond)
	if code, body := get(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "last went round") {
		t.Errorf("/healthz %d %q after the beats stopped; want 503", code, body)
	}
	beat.Beat()
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d after a beat", code)
	}
	if _, _, err := ListenProbes(ctx, addr.String(), "", reg, beat.Alive, nil); err == nil {
		t.Error("a taken address was accepted")
	}
}

// The probe socket replaces only a socket an earlier run left: not a
// file of another kind, and not one another process still serves.
func TestProbeSocketReplacesOnlyALeftOverSocket(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serve := func(socket string) error {
		_, _, err := ListenProbes(ctx, "127.0.0.1:0", socket, prometheus.NewRegistry(), func() error { return nil }, nil)
		return err
	}
	file := filepath.Join(dir, "file.sock")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := serve(file); err == nil {
		t.Error("a regular file at --probe-socket was replaced")
	}
	left := filepath.Join(dir, "left.sock")
	ln, err := net.Listen("unix", left)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // as a killed process leaves it
	if err := serve(left); err != nil {
		t.Errorf("a socket an earlier run left: %v", err)
	}
	if err := serve(left); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("a socket another process serves: %v", err)
	}
}

// The probe socket goes with its endpoint: once ctx ends, wait returns
// when the socket is removed, so a command that exits then leaves none.
func TestProbeSocketGoesWithTheEndpoint(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "gc.sock")
	ctx, cancel := context.WithCancel(context.Background())
	_, wait, err := ListenProbes(ctx, "127.0.0.1:0", socket, prometheus.NewRegistry(), func() error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(socket); err != nil {
		t.Fatalf("no probe socket while serving: %v", err)
	}
	cancel()
	wait()
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the probe socket is left once the endpoint stopped: %v", err)
	}
}
