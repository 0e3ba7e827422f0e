package calicosim

import (
	"io"
	"log/slog"
	"strings"
)

// newLogger logs to w (stderr in the binary) at a Calico log_level:
// debug, info, warning or error. Unknown levels mean info.
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
