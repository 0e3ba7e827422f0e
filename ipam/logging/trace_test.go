package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestTraceIsOffWithoutItsFile(t *testing.T) {
	t.Setenv(TraceEnv, "")
	tr := NewTrace()
	if tr != nil {
		t.Fatalf("NewTrace() = %+v with %s unset", tr, TraceEnv)
	}
	tr.Mark(MarkOpened) // a nil trace does nothing
	tr.Write()
	if got := TraceFrom(WithTrace(context.Background(), tr)); got != nil {
		t.Fatalf("TraceFrom = %+v, want nil", got)
	}
}

func TestTraceAppendsOneLinePerCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace")
	t.Setenv(TraceEnv, path)
	for call := 0; call < 2; call++ {
		tr := NewTrace()
		ctx := WithTrace(context.Background(), tr)
		TraceFrom(ctx).Mark(MarkOpened)
		TraceFrom(ctx).Mark(MarkRan)
		tr.Write()
	}
	lines := traceLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one per call", len(lines))
	}
	var got Trace
	if err := json.Unmarshal(lines[1], &got); err != nil {
		t.Fatal(err)
	}
	want := []string{MarkMain, MarkOpened, MarkRan}
	if len(got.Marks) != len(want) || got.PID != os.Getpid() {
		t.Fatalf("trace = %+v, want marks %v of pid %d", got, want, os.Getpid())
	}
	for i, m := range got.Marks {
		if m.Name != want[i] || (i > 0 && m.At < got.Marks[i-1].At) {
			t.Errorf("mark %d = %+v, want %s, not before the one before", i, m, want[i])
		}
	}
}

func TestLogCostIsTracedWhenTheLogCloses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trace")
	t.Setenv(TraceEnv, path)
	log, closeLog := New(filepath.Join(dir, "log"), "info")
	log.Info("ADD")
	if _, err := os.Stat(path); err == nil {
		t.Fatal("log cost traced before the log closed")
	}
	closeLog()
	lines := traceLines(t, path)
	var got logCost
	if len(lines) != 1 || json.Unmarshal(lines[0], &got) != nil {
		t.Fatalf("trace lines %q, want one log cost", lines)
	}
	if got.WrittenBytes == 0 || got.PID != os.Getpid() {
		t.Errorf("log cost %+v, want the line written by this process", got)
	}
}

func traceLines(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSpace(data), []byte("\n"))
}
