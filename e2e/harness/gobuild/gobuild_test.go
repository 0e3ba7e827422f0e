package gobuild

import (
	"context"
	"os"
	"strings"
	"testing"
)

// A build puts the program where Out says, with the flags and environment
// given; a failed one says which build and what go said.
func TestBuild(t *testing.T) {
	out := t.TempDir() + string(os.PathSeparator) + "peakrss"
	tests := []struct {
		name    string
		build   Build
		wantErr []string
	}{
		{"one package into a file", Build{Out: out, Pkgs: []string{"../../cmd/peakrss"}, Flags: []string{"-trimpath"}, Env: []string{"CGO_ENABLED=0"}}, nil},
		{"a package that is not there", Build{Out: out, Pkgs: []string{"./nonexistent"}, Dir: ".."},
			[]string{"go build -o " + out + " ./nonexistent in ..", "nonexistent"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.build.Run(context.Background())
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if st, err := os.Stat(out); err != nil || st.Mode()&0o111 == 0 {
					t.Fatalf("no program at %s: %v", out, err)
				}
				return
			}
			for _, want := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want it to say %q", err, want)
				}
			}
		})
	}
}
