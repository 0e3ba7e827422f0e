package detect

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// With --every the rounds go on, with the memory of gone owners, and
// --metrics-addr serves their findings until the command is stopped. A
// look may take longer than the period (Calico's allocations here take
// 1.5 of it; one look at 500,000 pods on the Kubernetes datastore took
// about one): the second look still comes, and confirms.
func TestLoopServesTheFindings(t *testing.T) {
	srv := kubetest.Start(t)
	for _, name := range []string{"a", "b"} {
		if _, err := srv.RunPod("default", name, "n-"+name, "10.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	every := 400 * time.Millisecond
	s := Sources{Kube: srv.Client(), LeakGrace: time.Minute, Settle: every / 4, Log: slog.New(slog.DiscardHandler),
		Allocations: func(ctx context.Context) ([]detect.Allocation, error) {
			select {
			case <-time.After(every * 3 / 2):
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}}
	var stderr lockedBuffer
	done := make(chan int)
	go func() {
		done <- loop(ctx, s, &options{every: every, settle: every / 4, metricsAddr: "127.0.0.1:0"}, &stderr)
	}()
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		addr, ok := strings.CutPrefix(strings.TrimSpace(stderr.String()), "safe-ipam detect: serving metrics at ")
		if !ok {
			continue
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); strings.Contains(body, `safe_ipam_detect_findings{kind="shared-address"} 1`) {
			break
		}
	}
	if !strings.Contains(body, `safe_ipam_detect_findings{kind="shared-address"} 1`) || !strings.Contains(body, `safe_ipam_detect_unknown{kind="shared-address"} 0`) {
		t.Fatalf("the metrics after rounds: %s\n%s", body, stderr.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("stopped: exit %d, want 0", code)
	}
}

// lockedBuffer is what the loop writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With --lease, of two instances only the one holding the Lease runs the
// rounds and serves their metrics; once it stops, the other takes over.
func TestOneInstanceHoldsTheLease(t *testing.T) {
	srv := kubetest.Start(t)
	if _, err := srv.RunPod("default", "a", "n1", "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	type instance struct {
		cancel context.CancelFunc
		stderr *lockedBuffer
		done   chan int
	}
	start := func(id string) *instance {
		ctx, cancel := context.WithCancel(context.Background())
		in := &instance{cancel: cancel, stderr: &lockedBuffer{}, done: make(chan int, 1)}
		s := Sources{Kube: srv.Client(), LeakGrace: time.Minute, Log: slog.New(slog.NewTextHandler(in.stderr, nil)),
			Allocations: func(context.Context) ([]detect.Allocation, error) { return nil, nil }}
		o := &options{every: 100 * time.Millisecond, metricsAddr: "127.0.0.1:0",
			election: election{Lease: "kube-system/safe-ipam-detect", Identity: id, LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}}
		go func() { in.done <- loop(ctx, s, o, in.stderr) }()
		return in
	}
	runsRounds := func(in *instance) bool {
		addr := ""
		for _, line := range strings.Split(in.stderr.String(), "\n") {
			if a, ok := strings.CutPrefix(line, "safe-ipam detect: serving metrics at "); ok {
				addr = a
			}
		}
		if addr == "" {
			return false
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "safe_ipam_detect_rounds_total")
	}
	first := start("first")
	waitFor(t, "the first instance to run the rounds", func() bool { return runsRounds(first) })
	second := start("second")
	time.Sleep(time.Second) // many of its retries
	if runsRounds(second) {
		t.Fatalf("both instances run the rounds:\n%s\n%s", first.stderr.String(), second.stderr.String())
	}
	first.cancel()
	if code := <-first.done; code != 0 {
		t.Errorf("the first instance stopped: exit %d\n%s", code, first.stderr.String())
	}
	waitFor(t, "the second instance to take over", func() bool { return runsRounds(second) })
	second.cancel()
	<-second.done
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
