package logging

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Issue 33, finding 5: a symlinked directory, a hard link and a blocked
// rotation each got past Open. Now the first two are refused and the log
// never grows past its cap.
func TestOpenHoldsItsCap(t *testing.T) {
	tests := []struct {
		name    string
		plant   func(t *testing.T, dir string) (path string, check func(t *testing.T))
		refused string // in the error; "" when the log opens
	}{
		{"a symlinked directory", func(t *testing.T, dir string) (string, func(t *testing.T)) {
			real := filepath.Join(dir, "real")
			must(t, os.Mkdir(real, 0o700))
			must(t, os.Symlink(real, filepath.Join(dir, "logs")))
			return filepath.Join(dir, "logs", "safe-ipam.log"), func(t *testing.T) {
				if _, err := os.Lstat(filepath.Join(real, "safe-ipam.log")); err == nil {
					t.Error("the log was created through the symlinked directory")
				}
			}
		}, "logs on its path is a symbolic link"},
		{"a symlink higher up the path (issue 42, item 3)", func(t *testing.T, dir string) (string, func(t *testing.T)) {
			real := filepath.Join(dir, "real")
			must(t, os.MkdirAll(filepath.Join(real, "cni"), 0o700))
			must(t, os.Symlink(real, filepath.Join(dir, "calico")))
			return filepath.Join(dir, "calico", "cni", "safe-ipam.log"), func(t *testing.T) {
				if _, err := os.Lstat(filepath.Join(real, "cni", "safe-ipam.log")); err == nil {
					t.Error("the log was created through the symlinked directory above its own")
				}
			}
		}, "calico on its path is a symbolic link"},
		{"a file with a second hard link", func(t *testing.T, dir string) (string, func(t *testing.T)) {
			other := filepath.Join(dir, "shadow")
			must(t, os.WriteFile(other, []byte("root:x:0:0\n"), 0o600))
			path := filepath.Join(dir, "safe-ipam.log")
			must(t, os.Link(other, path))
			return path, func(t *testing.T) {
				if data, _ := os.ReadFile(other); string(data) != "root:x:0:0\n" {
					t.Errorf("the other link was written: %q", data)
				}
			}
		}, "more than one link"},
		{"a directory where the rotated log goes", func(t *testing.T, dir string) (string, func(t *testing.T)) {
			path := filepath.Join(dir, "safe-ipam.log")
			must(t, os.WriteFile(path, bytes.Repeat([]byte("x"), MaxSize), 0o600))
			must(t, os.Mkdir(path+".1", 0o700))
			must(t, os.WriteFile(filepath.Join(path+".1", "keep"), nil, 0o600))
			return path, func(t *testing.T) {
				if info, err := os.Stat(path); err != nil || info.Size() > MaxSize/2 {
					t.Errorf("%s: %v; want it truncated, not growing past MaxSize", path, err)
				}
			}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, check := tt.plant(t, t.TempDir())
			f, err := Open(path)
			checkOpened(t, path, tt.refused, f, err)
			check(t)
		})
	}
}
