package logging

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"syscall"
	"time"
)

// TraceEnv names a file to which each CNI call appends when its phases
// ended, for the breakdown `make bench` prints. Unset, nothing is traced
// and a Trace is nil.
const TraceEnv = "SAFE_IPAM_TRACE"

// Trace marks the ends of the phases of one CNI call, in wall-clock
// nanoseconds, so that they line up with the caller's clock.
type Trace struct {
	path  string
	mu    *sync.Mutex // a VM pod's DEL runs two delegates at once
	Marks []Mark      `json:"marks"`
	PID   int         `json:"pid"`
}

// Mark is one phase boundary.
type Mark struct {
	Name string `json:"name"`
	At   int64  `json:"at"`
}

// Phase boundaries, in the order a call reaches them.
const (
	MarkMain          = "main"           // the process runs main: exec and init are done
	MarkResolved      = "resolved"       // config read and checked, the delegate found
	MarkOpened        = "opened"         // the store is open
	MarkDelegateStart = "delegate-start" // the delegate's exec starts
	MarkDelegateEnd   = "delegate-end"   // the delegate has answered
	MarkRan           = "ran"            // the verb is done
)

// NewTrace starts a trace at MarkMain when TraceEnv is set, else nil.
func NewTrace() *Trace {
	path := os.Getenv(TraceEnv)
	if path == "" {
		return nil
	}
	t := &Trace{path: path, mu: &sync.Mutex{}, PID: os.Getpid()}
	t.Mark(MarkMain)
	return t
}

// Mark records that a phase ended now. A nil Trace does nothing.
func (t *Trace) Mark(name string) {
	if t != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.Marks = append(t.Marks, Mark{Name: name, At: time.Now().UnixNano()})
	}
}

// Write appends the trace as one JSON line; tracing never fails a call.
func (t *Trace) Write() {
	if t != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		appendTrace(t.path, t)
	}
}

func appendTrace(path string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(data, '\n'))
}

type traceKey struct{}

// WithTrace carries t to the code a verb calls (the delegate).
func WithTrace(ctx context.Context, t *Trace) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, t)
}

// TraceFrom is the Trace ctx carries, or nil.
func TraceFrom(ctx context.Context) *Trace {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}
