package delegate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

func TestNegotiate(t *testing.T) {
	calico := []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"}
	tests := []struct {
		requested string
		supported []string
		want      string
		wantErr   bool
	}{
		{"1.1.0", calico, "1.0.0", false},
		{"1.0.0", calico, "1.0.0", false},
		{"0.4.0", calico, "0.4.0", false},
		{"0.3.1", []string{"1.0.0", "0.3.0"}, "0.3.0", false},
		{"0.4.0", []string{"1.0.0", "1.1.0"}, "", true},
		{"1.1.0", []string{"1.1.0", "0.4.0"}, "1.1.0", false},
	}
	for _, tt := range tests {
		got, err := Negotiate(tt.requested, tt.supported)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("Negotiate(%s, %v) = %q, %v; want %q", tt.requested, tt.supported, got, err, tt.want)
		}
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir()
	write := func(d, name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(d, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(dir, "calico-ipam", 0o755)
	write(dir, "not-exec", 0o644)
	write(other, "calico-ipam", 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Link(self, filepath.Join(other, "me")); err != nil {
		t.Skipf("cannot link the test binary: %v", err)
	}
	// Issue 42, item 1: a directory that leads into CNI_PATH through a
	// symbolic link is not CNI_PATH (flipped between the check and the
	// exec, it ran another file as root), and a node-allowed outside path
	// has no link on it.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
		target           Target
		missing, fails   bool
		outside          bool // refused: outside CNI_PATH
	}{
		{name: "binDir a symlink to a CNI_PATH directory", target: Target{Type: "calico-ipam", BinDir: link}, path: dir, outside: true},
		{name: "binDir outside CNI_PATH, allowed, through a symlink", target: Target{Type: "calico-ipam", BinDir: link, OutsideCNIPath: true}, path: other, outside: true},
		{name: "in CNI_PATH", target: Target{Type: "calico-ipam"}, path: other + ":" + dir, want: filepath.Join(other, "calico-ipam")},
		{name: "binDir wins over CNI_PATH's order", target: Target{Type: "calico-ipam", BinDir: dir}, path: other + ":" + dir, want: filepath.Join(dir, "calico-ipam")},
		{name: "binDir outside CNI_PATH", target: Target{Type: "calico-ipam", BinDir: dir}, path: other, outside: true},
		{name: "binDir outside CNI_PATH, allowed", target: Target{Type: "calico-ipam", BinDir: dir, OutsideCNIPath: true}, path: other, want: filepath.Join(dir, "calico-ipam")},
		{name: "missing", target: Target{Type: "host-local"}, path: dir, missing: true},
		{name: "not executable", target: Target{Type: "not-exec"}, path: dir, missing: true},
		{name: "itself", target: Target{Type: "me"}, path: other, fails: true},
		{name: "binary by name", target: Target{Type: "x", Binary: "calico-ipam"}, path: dir, want: filepath.Join(dir, "calico-ipam")},
		{name: "binary by path", target: Target{Type: "x", Binary: filepath.Join(other, "calico-ipam")}, path: dir + ":" + other + "/", want: filepath.Join(other, "calico-ipam")},
		{name: "binary by path outside CNI_PATH", target: Target{Type: "x", Binary: filepath.Join(other, "calico-ipam")}, path: dir, outside: true},
		{name: "binary by path outside CNI_PATH, allowed", target: Target{Type: "x", Binary: filepath.Join(other, "calico-ipam"), OutsideCNIPath: true}, path: dir, want: filepath.Join(other, "calico-ipam")},
		{name: "binary by path missing", target: Target{Type: "x", Binary: filepath.Join(other, "nope")}, path: other, missing: true},
		{name: "binary is itself", target: Target{Type: "calico-ipam", Binary: filepath.Join(other, "me")}, path: other, fails: true},
	}
	// The build a call was handed over to refuses the CNI binary that
	// handed it over (safe-ipam and safe-ipam-etcd would run each other).
	write(other, "handed-over-by", 0o755)
	tests = append(tests, struct {
		name, path, want string
		target           Target
		missing, fails   bool
		outside          bool
	}{name: "the binary that handed the call over", target: Target{Type: "handed-over-by"}, path: other, fails: true})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "the binary that handed the call over" {
				t.Setenv(builds.HandedOverEnv, filepath.Join(other, "handed-over-by"))
			}
			got, _, err := find(tt.target, tt.path)
			switch {
			case tt.outside:
				if !errors.Is(err, ErrOutsideCNIPath) || !strings.Contains(err.Error(), "--delegate-outside-cni-path") && !strings.Contains(err.Error(), "symbolic link") {
					t.Fatalf("err = %v; want ErrOutsideCNIPath naming the node setting, or the link", err)
				}
			case tt.missing:
				if !errors.Is(err, ErrMissing) {
					t.Fatalf("err = %v; want ErrMissing", err)
				}
			case tt.fails:
				if err == nil || errors.Is(err, ErrMissing) {
					t.Fatalf("err = %v; want a refusal", err)
				}
			case err != nil || got != tt.want:
				t.Fatalf("Find = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
