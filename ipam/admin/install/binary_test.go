package install

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// Run as safe-ipam-admin, install puts the CNI binary beside it on the
// node, never itself: the admin binary is no CNI plugin.
func TestInstallPicksTheCNIBuild(t *testing.T) {
	withCNI, alone := t.TempDir(), t.TempDir()
	for _, path := range []string{filepath.Join(withCNI, builds.CNIBinary), filepath.Join(withCNI, builds.AdminBinary), filepath.Join(alone, builds.AdminBinary)} {
		if err := os.WriteFile(path, []byte("#!"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct{ self, want string }{
		{filepath.Join(withCNI, builds.AdminBinary), filepath.Join(withCNI, builds.CNIBinary)},
		{filepath.Join(alone, builds.AdminBinary), ""}, // refused: it would install itself
		{filepath.Join(withCNI, builds.CNIBinary), filepath.Join(withCNI, builds.CNIBinary)},
	}
	for _, tt := range tests {
		got, err := cniBinaryBeside(tt.self)
		if got != tt.want || (tt.want == "") != (err != nil) {
			t.Errorf("cniBinaryBeside(%s) = %s, %v; want %q", tt.self, got, err, tt.want)
		}
	}
}
