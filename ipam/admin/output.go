package admin

import (
	"encoding/json"
	"flag"
	"io"
	"time"
)

// Output is --json and the overall time limit.
type Output struct {
	JSON    bool
	Timeout time.Duration
	limit   time.Duration
}

// NewOutput is the output group with a command's default time limit.
func NewOutput(limit time.Duration) *Output { return &Output{limit: limit} }

// Register adds --json, and --timeout for a command with a time limit
// (NewOutput(0) has none: it stays until done, or until stopped).
func (o *Output) Register(fs *flag.FlagSet) {
	fs.BoolVar(&o.JSON, "json", false, "print the report as JSON")
	if o.limit > 0 {
		fs.DurationVar(&o.Timeout, "timeout", o.limit, "overall time limit")
	}
}

// Resolve has nothing to check.
func (o *Output) Resolve(*Command) error { return nil }

// Print writes v as indented JSON with --json, else as text.
func (o *Output) Print(w io.Writer, v any, text func(io.Writer) error) error {
	if !o.JSON {
		return text(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
