package logging

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 20, finding 3: the log file is opened as root on every node in a
// directory a pod with a hostPath may write. A name planted there never
// makes safe-ipam write elsewhere, or hang; a full log is rotated.
func TestOpenRefusesWhatIsNotItsLogFile(t *testing.T) {
	tests := []struct {
		name    string
		plant   func(t *testing.T, path string) (check func(t *testing.T))
		refused string // in the error; "" when the log opens
	}{
		{"symlink to a root-owned file", func(t *testing.T, path string) func(t *testing.T) {
			target := filepath.Join(filepath.Dir(path), "shadow")
			must(t, os.WriteFile(target, []byte("root:x:0:0\n"), 0o600))
			must(t, os.Symlink(target, path))
			return func(t *testing.T) {
				if data, _ := os.ReadFile(target); string(data) != "root:x:0:0\n" {
					t.Errorf("the symlink's target was written: %q", data)
				}
			}
		}, "symbolic link"},
		{"symlink to a file that does not exist", func(t *testing.T, path string) func(t *testing.T) {
			target := filepath.Join(filepath.Dir(path), "created")
			must(t, os.Symlink(target, path))
			return func(t *testing.T) {
				if _, err := os.Lstat(target); err == nil {
					t.Error("the symlink's target was created")
				}
			}
		}, "symbolic link"},
		{"FIFO", func(t *testing.T, path string) func(t *testing.T) {
			must(t, syscall.Mkfifo(path, 0o600))
			return func(*testing.T) {}
		}, "log file"},
		{"directory", func(t *testing.T, path string) func(t *testing.T) {
			must(t, os.Mkdir(path, 0o700))
			return func(*testing.T) {}
		}, "log file"},
		{"a log past MaxSize is rotated", func(t *testing.T, path string) func(t *testing.T) {
			full := bytes.Repeat([]byte("x"), MaxSize)
			must(t, os.WriteFile(path, full, 0o600))
			return func(t *testing.T) {
				if info, err := os.Stat(path + ".1"); err != nil || info.Size() != MaxSize {
					t.Errorf("%s.1: %v; want the full log", path, err)
				}
				if info, err := os.Stat(path); err != nil || info.Size() != int64(len("line\n")) {
					t.Errorf("%s after rotation: %v; want only the new line", path, err)
				}
			}
		}, ""},
		{"no file yet", func(t *testing.T, path string) func(t *testing.T) {
			return func(t *testing.T) {
				if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
					t.Errorf("%s: %v; want a new file with mode 0600", path, err)
				}
			}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "safe-ipam.log")
			check := tt.plant(t, path)
			done := make(chan struct{})
			var f *os.File
			var err error
			go func() {
				f, err = Open(path)
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Open still blocks after 5s")
			}
			checkOpened(t, path, tt.refused, f, err)
			check(t)
		})
	}
}

// checkOpened fails t unless Open refused with a message naming path and
// refused, or, when refused is empty, opened a file that takes a line.
func checkOpened(t *testing.T, path, refused string, f *os.File, err error) {
	t.Helper()
	switch {
	case refused != "" && (err == nil || !strings.Contains(err.Error(), refused) || !strings.Contains(err.Error(), path)):
		t.Fatalf("Open = %v; want a refusal naming %s and %q", err, path, refused)
	case refused == "" && err != nil:
		t.Fatalf("Open: %v", err)
	case err == nil:
		_, werr := f.WriteString("line\n")
		must(t, werr)
		f.Close()
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The same through New, as every CNI call logs: a planted symlink's target
// is neither written nor created, and logging goes on (to stderr).
func TestNewNeverWritesThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	path, target := filepath.Join(dir, "safe-ipam.log"), filepath.Join(dir, "created-by-root")
	must(t, os.Symlink(target, path))
	log, closeLog := New(path, "info")
	log.Info("a CNI call")
	closeLog()
	if _, err := os.Lstat(target); err == nil {
		t.Fatal("logging created the symlink's target")
	}
}
