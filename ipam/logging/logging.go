// Package logging sets up safe-ipam's log: stderr and a file, never
// stdout, which carries the CNI result.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
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
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			fmt.Fprintf(os.Stderr, "safe-ipam: log file %s: %v; logging to stderr only\n", path, err)
		} else {
			out = io.MultiWriter(os.Stderr, f)
			closeFn = func() { f.Close() }
		}
	}
	out, closeFn = cost.watch(out, closeFn)
	handler := slog.NewTextHandler(out, &slog.HandlerOptions{Level: lvl})
	return slog.New(handler).With(attrs...), closeFn
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
