package bounded

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/bounded/boundedtest"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "name")
	if err := os.WriteFile(small, []byte("node1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		limit      int64
		want       string
		wantErr    error
	}{
		{"within the limit", small, 6, "node1\n", nil},
		{"one byte over", small, 5, "", ErrTooLarge},
		{"endless: a device", "/dev/zero", Name, "", ErrNotRegular},
		{"a FIFO with no writer: refused at once, never waited on", fifo, Name, "", ErrNotRegular},
		{"a directory", dir, Name, "", ErrNotRegular},
		{"missing", filepath.Join(dir, "missing"), Name, "", fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []byte
			err := boundedtest.Returns(t, "Read", func() (err error) { got, err = Read(tt.path, tt.limit); return err })
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.path) || strings.Count(err.Error(), tt.path) != 1 {
					t.Fatalf("Read = %v; want %v naming %s once", err, tt.wantErr, tt.path)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("Read = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// Every opener refuses what it did not ask for, at once: a FIFO where a
// file or directory belongs, a directory where a file does, a file where
// a directory does, and (OpenNoFollow) a symbolic link.
func TestOpenersRefuseWhatTheyDidNotAskFor(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	openFile := func(open func(string) (*os.File, error)) func(string) error {
		return func(p string) error {
			f, err := open(p)
			if err == nil {
				f.Close()
			}
			return err
		}
	}
	listDir := func(p string) error { _, err := ReadDir(p); return err }
	tests := []struct {
		name    string
		open    func(string) error
		path    string
		wantErr error
	}{
		{"Open: a file", openFile(Open), file, nil},
		{"Open: a link to a file", openFile(Open), link, nil},
		{"Open: a FIFO", openFile(Open), fifo, ErrNotRegular},
		{"Open: a directory", openFile(Open), dir, ErrNotRegular},
		{"OpenNoFollow: a file", openFile(OpenNoFollow), file, nil},
		{"OpenNoFollow: a link", openFile(OpenNoFollow), link, syscall.ELOOP},
		{"OpenNoFollow: a FIFO", openFile(OpenNoFollow), fifo, ErrNotRegular},
		{"OpenDir: a directory", openFile(OpenDir), dir, nil},
		{"OpenDir: a FIFO", openFile(OpenDir), fifo, ErrNotDirectory},
		{"OpenDir: a file", openFile(OpenDir), file, ErrNotDirectory},
		{"ReadDir: a FIFO", listDir, fifo, ErrNotDirectory},
		{"ReadDir: missing", listDir, filepath.Join(dir, "missing"), fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := boundedtest.Returns(t, tt.name, func() error { return tt.open(tt.path) })
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v; want %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.path) {
				t.Fatalf("%v does not name %s", err, tt.path)
			}
		})
	}
}

// ReadDir lists by name, as os.ReadDir does: callers rely on the order.
func TestReadDirSortsByName(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"c", "a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, "") != "abc" {
		t.Fatalf("ReadDir = %v; want a b c", names)
	}
}

// A refused file is never opened: opening a device can act (a watchdog
// device starts counting down). A FIFO shows it: a writer waiting on it
// goes on only once some reader opens it.
func TestARefusedFileIsNeverOpened(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	boundedtest.FIFO(t, fifo)
	opened := make(chan struct{})
	go func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		close(opened)
	}()
	defer func() { // let the writer go
		if r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-opened
			r.Close()
		}
	}()
	for _, open := range []func(string) (*os.File, error){Open, OpenNoFollow} {
		if _, err := open(fifo); !errors.Is(err, ErrNotRegular) {
			t.Fatalf("open = %v; want ErrNotRegular", err)
		}
	}
	select {
	case <-opened:
		t.Fatal("the refused FIFO was opened (its writer went on)")
	case <-time.After(200 * time.Millisecond):
	}
}
