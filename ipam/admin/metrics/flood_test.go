package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	addr, _, err := ListenProbes(ctx, "127.0.0.1:0", "", prometheus.NewRegistry(), func() error { return nil }, nil)
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

// Issue 42, item 5: under a continuous flood of new connections to the
// metrics port (the review opened 99,263; 26 of 200 probes failed), every
// probe asked at the probe socket answers. The flood's shedding and the
// accept queue are the port's; the socket, which only the container's
// processes reach, shares neither.
func TestProbesAnswerUnderAContinuousFlood(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	socket := filepath.Join(t.TempDir(), "probes", "watch.sock")
	addr, _, err := ListenProbes(ctx, "127.0.0.1:0", socket, prometheus.NewRegistry(), func() error { return nil }, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(socket); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("probe socket %v, %v; want mode 0600", st, err)
	}
	flood, stop := context.WithCancel(ctx)
	var opened atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for flood.Err() == nil {
				c, err := net.DialTimeout("tcp", addr.String(), time.Second)
				if err != nil {
					continue
				}
				opened.Add(1)
				if held = append(held, c); len(held) > 256 {
					held[0].Close()
					held = held[1:]
				}
			}
		}()
	}
	probe := func(addr, path string) error {
		client, base := ProbeClient(addr, 2*time.Second)
		resp, err := client.Get(base + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	}
	var failed, portFailed int
	for i := range 200 {
		path := []string{"/healthz", "/readyz"}[i%2]
		if err := probe("unix:"+socket, path); err != nil {
			failed++
			t.Errorf("probe %d (%s) at the socket under the flood: %v", i, path, err)
		}
		if i%20 == 0 && probe(addr.String(), path) != nil {
			portFailed++
		}
	}
	stop()
	wg.Wait()
	t.Logf("%d flood connections; probes at the socket failed %d of 200; at the port, %d of 10", opened.Load(), failed, portFailed)
	if opened.Load() < 1000 {
		t.Errorf("the flood opened %d connections; want thousands", opened.Load())
	}
}

// The endpoint's caps (docs/security.md): a request header over 8 KiB is
// refused, and a connection that never finishes its header is closed by
// the header timeout (5s) rather than held.
func TestTheEndpointCapsHeadersAndSilentConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, _, err := ListenProbes(ctx, "127.0.0.1:0", "", prometheus.NewRegistry(), func() error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr.String()+"/healthz", nil)
	req.Header.Set("X-Filler", strings.Repeat("x", 16<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 16 KiB header: %s; want 431", resp.Status)
	}
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\n") // and never the rest
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection that never finished its header was held past 15s (read: %v)", err)
	}
}
