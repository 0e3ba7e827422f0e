package calicosim

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogsGoToStderrAndLogFile: calico-ipam logs to stderr and appends
// to log_file_path, creating its directory.
func TestLogsGoToStderrAndLogFile(t *testing.T) {
	s := newSim(t, poolSpec{"p", "10.244.0.0/16", 26})
	logFile := filepath.Join(t.TempDir(), "log", "calico", "cni.log")
	conf := s.conf(map[string]any{"log_file_path": logFile})
	var stderr bytes.Buffer
	p := s.plugin(ModernHandles)
	p.Stderr = &stderr
	if _, err := p.Allocate(pod{container: "c1"}.args(conf)); err != nil {
		t.Fatal(err)
	}
	if err := p.Del(pod{container: "c1"}.args(conf)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("log_file_path: %v", err)
	}
	for _, out := range []struct{ name, text string }{{"stderr", stderr.String()}, {"log_file_path", string(data)}} {
		// Both commands' lines: the second command appended to the file.
		if !strings.Contains(out.text, "msg=assigned") || !strings.Contains(out.text, "msg=released") {
			t.Errorf("%s lacks the ADD and DEL lines:\n%s", out.name, out.text)
		}
	}
	if stderr.String() != string(data) {
		t.Errorf("stderr and log_file_path differ:\nstderr:\n%s\nfile:\n%s", stderr.String(), data)
	}
}

// TestBadLogFilePath: a log_file_path that cannot be opened is logged to
// stderr, naming the key, and the command goes on, as calico-ipam only
// logs that it failed to create the file's directory.
func TestBadLogFilePath(t *testing.T) {
	s := newSim(t, poolSpec{"p", "10.244.0.0/16", 26})
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := s.conf(map[string]any{"log_file_path": filepath.Join(notDir, "cni.log")})
	var stderr bytes.Buffer
	p := s.plugin(ModernHandles)
	p.Stderr = &stderr
	if _, err := p.Allocate(pod{container: "c1"}.args(conf)); err != nil {
		t.Fatalf("ADD with an unusable log_file_path: %v", err)
	}
	if n := len(s.state().Allocations()); n != 1 {
		t.Errorf("%d allocations after the ADD, want 1", n)
	}
	if !strings.Contains(stderr.String(), "log_file_path") {
		t.Errorf("stderr does not name log_file_path:\n%s", stderr.String())
	}
	if err := p.Del(pod{container: "c1"}.args(conf)); err != nil {
		t.Fatalf("DEL with an unusable log_file_path: %v", err)
	}
	if n := len(s.state().Allocations()); n != 0 {
		t.Errorf("%d allocations after the DEL", n)
	}
}
