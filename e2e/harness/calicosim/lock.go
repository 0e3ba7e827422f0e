package calicosim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultLockFile is the host-wide lock calico-ipam takes.
const DefaultLockFile = "/var/run/calico/ipam.lock"

// NoLock as the lock path skips locking, so tests can show the etcd
// transactions alone keep allocations apart.
const NoLock = "none"

// hostLock holds an flock on a file; the zero value holds nothing.
type hostLock struct{ f *os.File }

// lockHost takes an exclusive flock on path, waiting until ctx ends. As
// calico-ipam's, the lock is best effort: a lock file that cannot be made
// or opened (no /var/run/calico where calico-ipam runs in a container) is
// logged, and the command goes on without it, relying on the datastore's
// compare-and-swap alone.
func lockHost(ctx context.Context, path string, log *slog.Logger) (hostLock, error) {
	if path == NoLock {
		return hostLock{}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		log.Error("cannot make the IPAM lock's directory; going on without the host-wide lock", "error", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		log.Error("cannot open the IPAM lock; going on without the host-wide lock", "error", err)
		return hostLock{}, nil
	}
	// Poll with LOCK_NB rather than block, so a stuck holder cannot
	// outlive the command's deadline.
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return hostLock{f: f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return hostLock{}, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return hostLock{}, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// unlock releases the lock; closing the file drops the flock.
func (l hostLock) unlock() {
	if l.f != nil {
		l.f.Close()
	}
}
