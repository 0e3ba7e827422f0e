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
// --metrics-addr serves their findings until the command is stopped.
func TestLoopServesTheFindings(t *testing.T) {
	srv := kubetest.Start(t)
	for _, name := range []string{"a", "b"} {
		if _, err := srv.RunPod("default", name, "n-"+name, "10.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := Sources{Kube: srv.Client(), LeakGrace: time.Minute, Log: slog.New(slog.DiscardHandler),
		Allocations: func(context.Context) ([]detect.Allocation, error) { return nil, nil }}
	var stderr lockedBuffer
	done := make(chan int)
	go func() {
		done <- loop(ctx, s, &options{every: 200 * time.Millisecond, metricsAddr: "127.0.0.1:0"}, &stderr)
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
