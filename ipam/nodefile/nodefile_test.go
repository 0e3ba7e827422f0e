package nodefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
			var err error
			done := make(chan struct{})
			go func() { got, err = Read(tt.path, tt.limit); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Read still blocks after 5s")
			}
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
