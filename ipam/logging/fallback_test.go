package logging

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/security.md, "The log file": a refused log file is said on stderr
// (the runtime's log), and the call goes on logging there; and a value
// holding a control character reaches the log quoted, never raw.
func TestARefusedLogFileLeavesStderr(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	log, closeLog := New(filepath.Join(dir, "link", "safe-ipam.log"), "info")
	log.Info("released", "pod", "web-\x1b[2J0")
	closeLog()
	os.Stderr = stderr
	w.Close()
	out, _ := io.ReadAll(r)
	if !strings.Contains(string(out), "logging to stderr only") || !strings.Contains(string(out), "msg=released") {
		t.Fatalf("stderr %q; want the refusal and the call's log", out)
	}
	if strings.ContainsRune(string(out), 0x1b) || !strings.Contains(string(out), `\x1b`) {
		t.Fatalf("stderr %q; want the control character quoted", out)
	}
	if _, err := os.Stat(filepath.Join(real, "safe-ipam.log")); err == nil {
		t.Fatal("the log was written through the symbolic link")
	}
}
