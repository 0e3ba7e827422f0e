package nodefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "name")
	if err := os.WriteFile(small, []byte("node1\n"), 0o600); err != nil {
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
		{"endless", "/dev/zero", Name, "", ErrTooLarge},
		{"missing", filepath.Join(dir, "missing"), Name, "", fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(tt.path, tt.limit)
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
