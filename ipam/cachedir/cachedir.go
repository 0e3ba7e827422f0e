// Package cachedir keeps the small files of safe-ipam's cache dir
// (ipam.cacheDir): the delegate version cache and the CNI path's failure
// note. Each is written whole, a temporary file renamed into place, so a
// reader never sees half of one; a crash can leave a temporary file
// (".tmp-*"), which is only a few bytes and goes with the dir.
package cachedir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// Put writes data as name in dir, making dir if need be. It is best
// effort: what it keeps only saves work or tells the watch something, and
// the call that writes it must not fail for it. It reports whether the
// file is in place.
func Put(dir, name string, data []byte) bool {
	if dir == "" || os.MkdirAll(dir, 0o700) != nil {
		return false
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return false
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), filepath.Join(dir, name)) != nil {
		os.Remove(tmp.Name())
		return false
	}
	return true
}

// Get reads name in dir (at most bounded.Small); nil, nil when it is not
// there.
func Get(dir, name string) ([]byte, error) {
	if dir == "" {
		return nil, nil
	}
	data, err := bounded.Read(filepath.Join(dir, name), bounded.Small)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// HoldCall marks a CNI call of safe-ipam at work in dir, for as long as
// the call lives (release ends it; the process's exit does too): a shared
// flock on the dir itself, which uninstall takes exclusively
// (WaitForCalls) once Calico's files are back, so that no call begun
// before writes a record after uninstall looked. Best effort: a call is
// never failed or held up long for it.
func HoldCall(dir string) (release func()) {
	if dir == "" {
		return func() {}
	}
	d, err := bounded.OpenDir(dir)
	if errors.Is(err, fs.ErrNotExist) && os.MkdirAll(dir, 0o700) == nil {
		d, err = bounded.OpenDir(dir) // the node's first call
	}
	if err != nil {
		return func() {}
	}
	// Uninstall holds the lock exclusively only for an instant.
	for try := 0; try < 100; try++ {
		if err = syscall.Flock(int(d.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() { d.Close() }
}

// WaitForCalls waits until no CNI call holds dir (HoldCall), taking its
// lock exclusively and giving it back at once: every call that began
// before is over. It gives up when ctx ends.
func WaitForCalls(ctx context.Context, dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d, err := bounded.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CNI calls of safe-ipam still at work (a shared lock on %s): %w", dir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
