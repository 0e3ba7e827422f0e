// Package nodefile reads the files a node's configuration names
// (nodename_file, etcd TLS files, network configs, liveness lists) with a
// size limit, and errors that name the file and the setting, never the
// file's bytes: such a setting may name a key file by mistake, or
// /dev/zero, and errors reach logs, Kubernetes events and terminals.
package nodefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Limits by kind of file: far above any real one.
const (
	// Name is a file holding one name (nodename_file).
	Name = 4 << 10
	// Small is a certificate, key, kubeconfig or network config.
	Small = 1 << 20
	// List is a list a tool wrote (a liveness file).
	List = 64 << 20
)

// ErrTooLarge means the file is larger than its limit.
var ErrTooLarge = errors.New("larger than safe-ipam reads")

// ErrNotRegular means the path names a FIFO, a device, a socket or a
// directory, which a CNI call could block on or read without end.
var ErrNotRegular = errors.New("not a regular file")

// Read reads the regular file at path, refusing one of more than limit
// bytes. It opens without blocking (a FIFO planted at a configured path
// would otherwise hold every CNI call until its deadline and beyond) and
// refuses what is not a regular file. Errors name the path (callers add
// the setting); a missing file is one wrapping fs.ErrNotExist.
func Read(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w (%d bytes)", path, ErrTooLarge, limit)
	}
	return data, nil
}

// unwrapPath drops the *fs.PathError's repetition of the path.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}
