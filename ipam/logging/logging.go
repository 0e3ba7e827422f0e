// Package logging sets up safe-ipam's log: stderr and a file, never
// stdout, which carries the CNI result.
package logging

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"
)

// New returns a logger writing to stderr and, when path is set, appending
// to path. A log file that cannot be opened is reported on stderr and
// otherwise ignored: logging must not stop an ADD or DEL. With TraceEnv
// set, the time spent opening the log and writing to it is appended to
// the trace when the log is closed.
func New(path, level string, attrs ...any) (*slog.Logger, func()) {
	cost := newLogCost()
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		lvl = slog.LevelInfo
	}
	var out io.Writer = os.Stderr
	closeFn := func() {}
	if path != "" {
		f, err := Open(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "safe-ipam: %v; logging to stderr only\n", err)
		} else {
			out = io.MultiWriter(os.Stderr, f)
			closeFn = func() { f.Close() }
		}
	}
	out, closeFn = cost.watch(out, closeFn)
	handler := slog.NewTextHandler(out, &slog.HandlerOptions{Level: lvl})
	return slog.New(handler).With(attrs...), closeFn
}

// MaxSize caps the log file: past it, the file is renamed to <path>.1
// (replacing the previous one) and a new one started, so the log takes at
// most twice this on disk.
const MaxSize = 10 << 20

// Open opens the log file at path for appending, as root on every node,
// where a pod with a hostPath on the log's directory could plant a name:
// it never follows a symbolic link there (it would append to, or create,
// any file), refuses anything but a regular file (a FIFO would block
// every CNI call), and rotates a file past MaxSize. Errors name the path.
func Open(path string) (*os.File, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil || info.Size() < MaxSize {
		return f, nil
	}
	// Rotate only the file this process opened: another process may have
	// rotated it meanwhile, and two rotations would drop the older half.
	if now, err := os.Lstat(path); err == nil && os.SameFile(now, info) {
		_ = os.Rename(path, path+".1")
	}
	f.Close()
	return openRegular(path)
}

func openRegular(path string) (*os.File, error) {
	// O_NONBLOCK: opening a FIFO for writing waits for a reader otherwise.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("log file %s is a symbolic link, which safe-ipam does not follow", path)
	}
	if err != nil {
		return nil, fmt.Errorf("log file %s: %w", path, err)
	}
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("log file %s is not a regular file", path)
	}
	return f, nil
}

// logCost is what logging cost one call, for the trace; nil when not
// tracing.
type logCost struct {
	path         string
	start        time.Time
	PID          int   `json:"pid"`
	OpenNanos    int64 `json:"logOpenNanos"`
	WriteNanos   int64 `json:"logWriteNanos"`
	WrittenBytes int   `json:"logBytes"`
}

func newLogCost() *logCost {
	path := os.Getenv(TraceEnv)
	if path == "" {
		return nil
	}
	return &logCost{path: path, start: time.Now(), PID: os.Getpid()}
}

// watch ends the open phase and times every write to out; the returned
// close appends the cost to the trace.
func (c *logCost) watch(out io.Writer, closeFn func()) (io.Writer, func()) {
	if c == nil {
		return out, closeFn
	}
	c.OpenNanos = time.Since(c.start).Nanoseconds()
	return timedWriter{out, c}, func() {
		closeFn()
		appendTrace(c.path, c)
	}
}

type timedWriter struct {
	w    io.Writer
	cost *logCost
}

func (t timedWriter) Write(p []byte) (int, error) {
	start := time.Now()
	n, err := t.w.Write(p)
	t.cost.WriteNanos += time.Since(start).Nanoseconds()
	t.cost.WrittenBytes += n
	return n, err
}
