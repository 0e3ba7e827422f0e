package delegate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// The bench's breakdown tells the delegate's time from safe-ipam's own by
// the marks around each delegate exec.
func TestDelegateExecIsMarkedInTheTrace(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "ok")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(logging.TraceEnv, filepath.Join(dir, "trace"))
	tr := logging.NewTrace()
	d := &Delegate{Type: "ok", Path: plugin}
	if err := d.Run(logging.WithTrace(context.Background(), tr), "DEL", []byte(`{}`), Env{ContainerID: "c1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range tr.Marks {
		names = append(names, m.Name)
	}
	want := []string{logging.MarkMain, logging.MarkDelegateStart, logging.MarkDelegateEnd}
	if len(names) != len(want) || names[1] != want[1] || names[2] != want[2] {
		t.Fatalf("marks %v, want %v", names, want)
	}
}
