package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
)

// The CNI binary links no admin package (plugin/safe-ipam's split test
// pins that), but the admin binary runs every package's init on every
// command, and the DaemonSet's probe runs doctor every few seconds. The
// admin packages must not do work there: this reads the runtime's own
// account of each package's init (GODEBUG=inittrace=1), which counts
// bytes allocated, not time.
func TestAdminPackagesDoNoWorkAtInit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "safe-ipam-admin")
	build := gobuild.Build{Out: bin, Pkgs: []string{"github.com/safe-ipam/safe-ipam/plugin/safe-ipam-admin"}}
	if err := build.Run(context.Background()); err != nil {
		t.Fatalf("building: %v", err)
	}
	inits := initBytes(t, bin)
	tests := []struct {
		pkg      string
		maxBytes int
	}{
		// Its name patterns compile on first use; what is left is a small
		// map and a few closures.
		{"github.com/safe-ipam/safe-ipam/ipam/admin/audit", 4096},
	}
	for _, tt := range tests {
		got, ok := inits[tt.pkg]
		if !ok {
			continue // no init work at all
		}
		if got > tt.maxBytes {
			t.Errorf("init of %s allocates %d bytes on every CNI call, want at most %d", tt.pkg, got, tt.maxBytes)
		}
	}
}

// initBytes runs bin's version command and returns the bytes each
// package's init allocated, as the runtime reports them:
// "init <pkg> @<t> ms, <d> ms clock, <n> bytes, <m> allocs".
func initBytes(t *testing.T, bin string) map[string]int {
	t.Helper()
	cmd := exec.Command(bin, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1", "CNI_COMMAND=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("version: %v %s %s", err, out, stderr.String())
	}
	inits := map[string]int{}
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		var pkg string
		var at, clock float64
		var n, allocs int
		if _, err := fmt.Sscanf(sc.Text(), "init %s @%f ms, %f ms clock, %d bytes, %d allocs", &pkg, &at, &clock, &n, &allocs); err == nil {
			inits[pkg] = n
		}
	}
	if len(inits) == 0 {
		t.Fatalf("no inittrace lines in:\n%s", stderr.String())
	}
	return inits
}
