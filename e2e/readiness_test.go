package e2e

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
)

// Issue 44, item 1: readiness is the truth. With the record store and
// Calico's datastore (one etcd here) not answering, every ADD fails: the
// watch's /readyz and safe_ipam_protected say so within one CheckEvery of
// the failed ADD (the watch's local check reads the CNI path's failure
// note), and say ready again by themselves once a call succeeds. Before,
// the last verdict stood: Ready, and protected 1, while no pod started.
func TestReadinessSaysWhatPodsMeet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, srv := newClusterServer(t, "rdy")
	dumpOnFailure(t, c)
	n, _ := nodeWithStore(t, ctx, c, false)
	n.admin(t, 0, "install")
	w := n.startWatch(t, install.ModeTakeover)
	// The delay docs/operations.md states, with room for a loaded machine.
	bound := install.CheckEvery + time.Minute
	w.waitVerdict(t, true, bound)
	n.add(t, ctx, podSandbox(t, ctx, c, "p"))
	q := podSandbox(t, ctx, c, "q")

	srv.Pause()
	if _, err := n.runner.Add(ctx, calicoNetwork, q); err == nil {
		t.Fatal("an ADD succeeded with the record store's etcd paused")
	}
	w.waitVerdict(t, false, bound)

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	n.add(t, ctx, podSandbox(t, ctx, c, "r"))
	w.waitVerdict(t, true, bound)
	// r's ADD removed the note: ready because a call succeeded, not only
	// because a full check found the store answering.
	if _, out := n.doctor(); strings.Contains(out, "a CNI call failed") {
		t.Errorf("doctor after an ADD succeeded still warns of the failure:\n%s", out)
	}
}

// waitVerdict waits until /readyz and safe_ipam_protected both say ready
// (or both say not ready), failing the test after bound.
func (w *watchProcess) waitVerdict(t *testing.T, ready bool, bound time.Duration) {
	t.Helper()
	var readyz int
	var protected float64
	for end := time.Now().Add(bound); ; {
		readyz, protected = w.readyz(), w.metric("safe_ipam_protected")
		if (readyz == http.StatusOK) == ready && (protected == 1) == ready {
			return
		}
		if time.Now().After(end) {
			w.mu.Lock()
			defer w.mu.Unlock()
			t.Fatalf("after %s: /readyz %d, safe_ipam_protected %v; want ready %v\nwatch log:\n%s", bound, readyz, protected, ready, strings.Join(w.log, "\n"))
		}
		time.Sleep(time.Second)
	}
}

// readyz is the status of the watch's /readyz (0: no answer).
func (w *watchProcess) readyz() int {
	resp, err := http.Get("http://" + w.metrics + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// metric is a gauge's value on the watch's /metrics (-1: none).
func (w *watchProcess) metric(name string) float64 {
	resp, err := http.Get("http://" + w.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}
