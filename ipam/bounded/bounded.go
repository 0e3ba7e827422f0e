// Package bounded is the one way safe-ipam opens a file or directory to
// read it: the files a node's configuration names (nodename_file, etcd TLS
// files, network configs, liveness lists), its own state (records, node
// settings, the delegate version cache, uninstall's state, kept
// originals' sums), the CNI result cache and the binaries install scans.
// Every open is non-blocking and refuses what is not a regular file (or
// directory): a FIFO planted at any of these paths would otherwise hold a
// CNI call past its deadline, or an admin command past SIGTERM. Reads are
// size-bounded, and errors name the file, never its bytes: such a setting
// may name a key file by mistake, or /dev/zero, and errors reach logs,
// Kubernetes events and terminals. e2e/layout forbids other reads.
package bounded

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
)

// Limits by kind of file: far above any real one.
const (
	// Name is a file holding one name (nodename_file).
	Name = 4 << 10
	// Small is a certificate, key, kubeconfig, network config or one of
	// safe-ipam's own state files.
	Small = 1 << 20
	// List is a list a tool wrote (a liveness file).
	List = 64 << 20
	// Binary is an executable install copies or scans.
	Binary = 1 << 30
)

// ErrTooLarge means the file is larger than its limit.
var ErrTooLarge = errors.New("larger than safe-ipam reads")

// ErrNotRegular means the path names a FIFO, a device, a socket or a
// directory, which a CNI call could block on or read without end.
var ErrNotRegular = errors.New("not a regular file")

// ErrNotDirectory means the path to list or lock is not a directory.
var ErrNotDirectory = errors.New("not a directory")

// Read reads the regular file at path, refusing one of more than limit
// bytes. Errors name the path (callers add the setting); a missing file
// is one wrapping fs.ErrNotExist.
func Read(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, limit)
}

// ReadAll reads f, opened by Open, refusing more than limit bytes. Its
// buffer is sized from the file's size, as os.ReadFile sizes it: grown by
// doubling, a large file would cost the process several times its size.
func ReadAll(f *os.File, limit int64) ([]byte, error) {
	var size int64
	if info, err := f.Stat(); err == nil {
		size = min(info.Size(), limit)
	}
	// Room for the end too: ReadFrom grows a buffer with less than
	// bytes.MinRead free before it reads the EOF.
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead+1))
	_, err := buf.ReadFrom(io.LimitReader(f, limit+1))
	data := buf.Bytes()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), unwrapPath(err))
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w (%d bytes)", f.Name(), ErrTooLarge, limit)
	}
	return data, nil
}

// Open opens the regular file at path to read, without blocking: a FIFO
// (even one no process writes), device or socket there is refused with
// ErrNotRegular. A symbolic link is followed (a kubeconfig or a mounted
// ConfigMap's file is often one); OpenNoFollow is for a file that must be
// the one at path.
func Open(path string) (*os.File, error) { return open(path, 0) }

// OpenNoFollow is Open refusing a symbolic link at path's last element.
func OpenNoFollow(path string) (*os.File, error) { return open(path, syscall.O_NOFOLLOW) }

func open(path string, flags int) (*os.File, error) {
	// Checked before the open too: opening a device can act (a watchdog
	// device starts counting down), and a refused input changes nothing.
	stat := os.Stat
	if flags&syscall.O_NOFOLLOW != 0 {
		stat = os.Lstat
	}
	if info, err := stat(path); err == nil && !info.Mode().IsRegular() && info.Mode().Type() != os.ModeSymlink {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|flags, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	return f, nil
}

// OpenDir opens the directory at path (to list, sync or flock it) without
// blocking: anything else there is refused with ErrNotDirectory.
func OpenDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if errors.Is(err, syscall.ENOTDIR) {
		return nil, fmt.Errorf("%s: %w", path, ErrNotDirectory)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	return f, nil
}

// ReadDir lists the directory at path sorted by name, as os.ReadDir does,
// opened by OpenDir.
func ReadDir(path string) ([]os.DirEntry, error) {
	d, err := OpenDir(path)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// unwrapPath drops the *fs.PathError's repetition of the path.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
