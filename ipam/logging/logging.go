// Package logging sets up safe-ipam's log: stderr and a file, never
// stdout, which carries the CNI result.
package logging

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
// it never follows a symbolic link there, neither the file's name nor its
// directory's (it would append to, or create, any file), refuses anything
// but a regular file with one link (a FIFO would block every CNI call; a
// hard link would make it write into another file), and rotates a file
// past MaxSize; where rotation fails it truncates the file rather than let
// it grow. Errors name the path.
func Open(path string) (*os.File, error) {
	dir, err := openDir(path)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	f, err := openRegular(dir, path)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil || info.Size() < MaxSize {
		return f, nil
	}
	if err := rotate(dir, path, info); err != nil {
		// A full log stays at its cap: its newest lines are the ones an
		// operator needs.
		fmt.Fprintf(os.Stderr, "safe-ipam: log file %s: rotating: %v; truncating it\n", path, err)
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, fmt.Errorf("log file %s is full and neither rotates nor truncates: %w", path, err)
		}
		return f, nil
	}
	f.Close()
	return openRegular(dir, path)
}

// openDir opens the log's directory one component at a time from the
// root, following no symbolic link anywhere on the way: a pod with a
// hostPath on any directory above the log could swap one for a link.
func openDir(path string) (int, error) {
	dir := filepath.Dir(filepath.Clean(path))
	start, rest := ".", dir
	if filepath.IsAbs(dir) {
		start, rest = "/", strings.TrimPrefix(dir, "/")
	}
	fd, err := unix.Open(start, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("log file %s: opening %s: %w", path, start, err)
	}
	walked := strings.TrimSuffix(start, ".")
	for _, name := range strings.Split(rest, "/") {
		if name == "" || name == "." {
			continue
		}
		walked = filepath.Join(walked, name)
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		switch {
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
			return -1, fmt.Errorf("log file %s: %s on its path is a symbolic link or not a directory, which safe-ipam does not follow", path, walked)
		case err != nil:
			return -1, fmt.Errorf("log file %s: its directory %s: %w", path, walked, err)
		}
		fd = next
	}
	return fd, nil
}

// rotate renames the log to <path>.1 within dir, but only the file this
// process opened: another process may have rotated it meanwhile, and two
// rotations would drop the older half.
func rotate(dir int, path string, opened os.FileInfo) error {
	base := filepath.Base(path)
	var now unix.Stat_t
	if err := unix.Fstatat(dir, base, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st, ok := opened.Sys().(*syscall.Stat_t); !ok || st.Ino != now.Ino || st.Dev != now.Dev {
		return nil // rotated by another process
	}
	return unix.Renameat(dir, base, dir, base+".1")
}

func openRegular(dir int, path string) (*os.File, error) {
	// O_NONBLOCK: opening a FIFO for writing waits for a reader otherwise.
	fd, err := unix.Openat(dir, filepath.Base(path), unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("log file %s is a symbolic link, which safe-ipam does not follow", path)
	}
	if err != nil {
		return nil, fmt.Errorf("log file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("log file %s is not a regular file", path)
	}
	if st, ok := info.Sys().(*syscall.Stat_t); !ok || st.Nlink > 1 {
		f.Close()
		return nil, fmt.Errorf("log file %s has more than one link: writing it would write another file too", path)
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
