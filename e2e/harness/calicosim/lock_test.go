package calicosim

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAddWaitsForHostLock holds the lock file and checks an ADD waits for
// it, and that the lock's directory is created.
func TestAddWaitsForHostLock(t *testing.T) {
	s := newSim(t, poolSpec{"p", "10.244.0.0/16", 26})
	path := filepath.Join(t.TempDir(), "run", "calico", "ipam.lock")
	p := s.plugin(ModernHandles)
	p.Getenv = func(k string) string {
		if k == EnvLockFile {
			return path
		}
		return ""
	}
	if _, err := p.Allocate(pod{container: "first"}.args(s.conf(nil))); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("lock file not created: %v", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("lock still held after ADD returned: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Allocate(pod{container: "second"}.args(s.conf(nil)))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("ADD finished while the host lock was held (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ADD did not proceed after the lock was released")
	}
}

// TestEtcdOutageFailsWithinTimeout: with etcd down a command fails at its
// deadline rather than hanging the caller.
func TestEtcdOutageFailsWithinTimeout(t *testing.T) {
	s := newSim(t, poolSpec{"p", "10.244.0.0/16", 26})
	env := map[string]string{EnvLockFile: NoLock, EnvTimeout: "500ms"}
	p := New(func(k string) string { return env[k] }, io.Discard, io.Discard)
	s.etcd.Pause()
	start := time.Now()
	_, err := p.Allocate(pod{container: "c"}.args(s.conf(nil)))
	if err == nil {
		t.Fatal("ADD succeeded with etcd down")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("ADD took %v with a 500ms timeout", took)
	}
	env[EnvTimeout] = "soon"
	if err := p.Del(pod{container: "c"}.args(s.conf(nil))); err == nil || !strings.Contains(err.Error(), EnvTimeout) {
		t.Errorf("bad timeout accepted: %v", err)
	}
}

// TestHostLockPath: without CALICO_IPAM_LOCK_FILE the lock is Calico's
// /var/run/calico/ipam.lock, and taking a lock creates the file and its
// directory wherever the path points.
func TestHostLockPath(t *testing.T) {
	explicit := filepath.Join(t.TempDir(), "var", "run", "calico", "ipam.lock")
	tests := []struct {
		name, env, want string
	}{
		{"default", "", "/var/run/calico/ipam.lock"},
		{"explicit", explicit, explicit},
		{"none", NoLock, NoLock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(func(k string) string {
				if k == EnvLockFile {
					return tt.env
				}
				return ""
			}, io.Discard, io.Discard)
			if got := p.lockPath(); got != tt.want {
				t.Errorf("lock path %q, want %q", got, tt.want)
			}
		})
	}
	l, err := lockHost(context.Background(), explicit, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.unlock()
	if _, err := os.Stat(explicit); err != nil {
		t.Errorf("lock file not created: %v", err)
	}
}

// TestHostLockBestEffort: a lock file that cannot be made (as in a
// container with a read-only /var/run) is logged and the command goes on,
// as calico-ipam's best-effort lock does.
func TestHostLockBestEffort(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	l, err := lockHost(context.Background(), filepath.Join(notDir, "ipam.lock"), slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatalf("an unusable lock path fails the command: %v", err)
	}
	l.unlock()
	if !strings.Contains(logged.String(), "without the host-wide lock") {
		t.Errorf("nothing logged about the lock: %q", logged.String())
	}
}
