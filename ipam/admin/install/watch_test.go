package install

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The watch puts safe-ipam back each time calico-node's installer undoes
// it, and measures for how long the node was unprotected. The window is
// reported, not asserted: it depends on the machine's load.
func TestWatchReassertsAfterCalicoRestarts(t *testing.T) {
	const restarts = 5
	for _, mc := range replacing() {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			got := startWatch(t, f, mc.mode, 0)
			var windows []time.Duration
			for i := range restarts {
				f.calicoRestarts(t, "v"+string(rune('2'+i)))
				r := waitFor(t, got, "a re-assertion")
				if err := mc.protected(t, f); err != nil {
					t.Fatalf("after re-assertion %d: %v", i+1, err)
				}
				windows = append(windows, r.Window())
			}
			slices.Sort(windows)
			t.Logf("%s: unprotected after each of %d calico-node restarts: min %v, median %v, max %v (settle %v)",
				mc.mode.Name(), restarts, windows[0], windows[len(windows)/2], windows[len(windows)-1], DefaultSettle)
		})
	}
}

// While a watch runs, uninstall refuses (the watch would put safe-ipam
// back within moments while uninstall said it took it off, issue 19
// item 2) and changes nothing; once the watch stops, it uninstalls.
func TestUninstallRefusesWhileAWatchHoldsTheNode(t *testing.T) {
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			_, stop := startWatchStoppable(t, f, mc.mode, 0)
			if _, err := Uninstall(f.node, mc.mode, false); !errors.Is(err, ErrWatched) {
				t.Fatalf("uninstall under a watch: %v; want ErrWatched", err)
			}
			// Issue 44, item 11: the command says so once (it said it
			// once per mode).
			var stdout, stderr bytes.Buffer
			if code := RunUninstall([]string{"--cni-bin-dir", f.node.BinDir, "--cni-conf-dir", f.node.ConfDir}, &stdout, &stderr); code != ExitRefused ||
				strings.Count(stderr.String(), "a watch (safe-ipam install --watch") != 1 {
				t.Fatalf("safe-ipam uninstall under a watch: exit %d, %q; want exit %d saying so once", code, stderr.String(), ExitRefused)
			}
			if err := mc.protected(t, f); err != nil {
				t.Fatalf("a refused uninstall changed the node: %v", err)
			}
			stop()
			r, err := Uninstall(f.node, mc.mode, false)
			if err != nil || !r.Applied {
				t.Fatalf("uninstall once the watch stopped: %+v, %v", r, err)
			}
			if err := mc.protected(t, f); err == nil {
				t.Fatal("still protected after uninstall")
			}
		})
	}
}

// startWatch runs a watch on f's node until the test ends, waits for its
// first install, and returns its re-assertions.
func startWatch(t *testing.T, f *fixture, mode Mode, settle time.Duration) <-chan Reassertion {
	t.Helper()
	got, _ := startWatchStoppable(t, f, mode, settle)
	return got
}

// startWatchStoppable is startWatch with a stop for the test to call
// before it ends.
func startWatchStoppable(t *testing.T, f *fixture, mode Mode, settle time.Duration) (<-chan Reassertion, func()) {
	t.Helper()
	got := make(chan Reassertion, 16)
	w := &Watcher{Node: f.node, Mode: mode, Self: f.self, Settle: settle, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Reasserted: func(r Reassertion) { got <- r }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(stop)
	waitFor(t, got, "the first install")
	return got, stop
}

func waitFor(t *testing.T, got <-chan Reassertion, what string) Reassertion {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
	}
	return Reassertion{}
}

// A re-install that fails (here: another install holds the node's lock)
// is tried again until it works, without waiting for another change: the
// node is unprotected meanwhile.
func TestWatchRetriesAFailedReinstall(t *testing.T) {
	mc := modes[0]
	f := newFixture(t)
	got := startWatch(t, f, mc.mode, 10*time.Millisecond)
	unlock, err := f.node.lock()
	if err != nil {
		t.Fatal(err)
	}
	f.calicoRestarts(t, "v2")
	time.Sleep(200 * time.Millisecond) // let attempts fail on the lock
	unlock()
	waitFor(t, got, "a re-assertion once the lock is free")
	if err := mc.protected(t, f); err != nil {
		t.Fatal(err)
	}
}
