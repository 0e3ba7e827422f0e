package calicosim

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// openLog logs to stderr and, when log_file_path is set, appends to that
// file too, as calico-ipam does. The returned func closes the file. A file
// that cannot be opened (a read-only or missing /var/log, as in a
// container that runs calico-ipam) is logged as an error and the command
// goes on, logging to stderr only: calico-ipam does not fail for its log.
func openLog(stderr io.Writer, conf *NetConf) (*slog.Logger, func(), error) {
	if conf.LogFilePath == "" {
		return newLogger(stderr, conf.LogLevel), func() {}, nil
	}
	f, err := openLogFile(conf.LogFilePath)
	if err != nil {
		log := newLogger(stderr, conf.LogLevel)
		log.Error("cannot log to log_file_path", "error", err)
		return log, func() {}, nil
	}
	return newLogger(io.MultiWriter(stderr, f), conf.LogLevel), func() { f.Close() }, nil
}

func openLogFile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("log_file_path: creating directory of %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log_file_path: opening %s: %w", path, err)
	}
	return f, nil
}

// newLogger logs to w at a Calico log_level: debug, info, warning or
// error. Unknown levels mean info.
func newLogger(w io.Writer, level string) *slog.Logger {
	lvl := slog.LevelInfo
	switch strings.ToLower(level) {
	case "debug":
		lvl = slog.LevelDebug
	case "warning", "warn":
		lvl = slog.LevelWarn
	case "error", "fatal", "panic":
		lvl = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}
