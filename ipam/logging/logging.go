// Package logging sets up safe-ipam's log: stderr and a file, never
// stdout, which carries the CNI result.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
)

// New returns a logger writing to stderr and, when path is set, appending
// to path. A log file that cannot be opened is reported on stderr and
// otherwise ignored: logging must not stop an ADD or DEL.
func New(path, level string, attrs ...any) (*slog.Logger, func()) {
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
	handler := slog.NewTextHandler(out, &slog.HandlerOptions{Level: lvl})
	return slog.New(handler).With(attrs...), closeFn
}
