package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Issue 33, finding 1: thousands of idle keep-alive connections, and
// thousands that never send a byte, each held a goroutine and buffers
// until the container's memory limit. Now the endpoint holds at most
// MaxConns and still answers a probe.
func TestListenSurvivesAFlood(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Listen(ctx, "127.0.0.1:0", prometheus.NewRegistry(), func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	const flood = 3000
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range flood {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 0 { // one request, then idle on keep-alive
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		}
	}
	// Let the server accept what the kernel queued.
	var held int
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		held = runtime.NumGoroutine() - base
		if held <= 2*MaxConns {
			break
		}
	}
	if held > 2*MaxConns {
		t.Errorf("%d connections hold %d more goroutines; want at most %d", flood, held, 2*MaxConns)
	}
	probe := &http.Client{Timeout: 2 * time.Second}
	for i := range 5 {
		resp, err := probe.Get("http://" + addr.String() + "/healthz")
		if err != nil {
			t.Fatalf("probe %d under the flood: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("probe %d under the flood: %s", i, resp.Status)
		}
	}
}
