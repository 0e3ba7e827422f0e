package admin

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"
	"unicode"
	"unicode/utf8"
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

// ForPeople is w with every control character other than tab and newline
// written as \u00XX (DEL and the C1 controls too), every format
// character (bidi overrides such as U+202E, zero-width ones such as
// U+200B, which make a name read as another) and line or paragraph
// separator as \uXXXX, and every byte that is not UTF-8 as \xNN. Every admin command writes through it: names from
// records, Calico's data, the runtime and file names reach the tables,
// and an ifname CNI admits may hold ESC, which would drive the
// operator's terminal. JSON stays valid: encoding/json escapes the C0
// controls itself, and a \u escape is valid JSON in a string, the only
// place the rest can appear.
func ForPeople(w io.Writer) io.Writer { return &peopleWriter{w: w} }

type peopleWriter struct {
	w io.Writer
	// tail is an incomplete UTF-8 sequence at the end of the last write,
	// held until the next one completes it.
	tail []byte
}

func (p *peopleWriter) Write(b []byte) (int, error) {
	data := append(p.tail, b...)
	cut := incompleteTail(data)
	out := make([]byte, 0, cut)
	for i := 0; i < cut; {
		r, size := utf8.DecodeRune(data[i:cut])
		switch {
		case r == utf8.RuneError && size == 1:
			out = fmt.Appendf(out, `\x%02x`, data[i])
		case r == '\t' || r == '\n':
			out = append(out, byte(r))
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, data[i:i+size]...)
		}
		i += size
	}
	p.tail = append([]byte(nil), data[cut:]...)
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// incompleteTail is where an unfinished UTF-8 sequence at the end of data
// starts (len(data) when there is none).
func incompleteTail(data []byte) int {
	for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				return i
			}
			break
		}
	}
	return len(data)
}
