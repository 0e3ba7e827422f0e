package install

import (
	"os"
	"path/filepath"
	"testing"
)

// Run as safe-ipam-admin, install puts the CNI binary beside it on the
// node, never itself: the admin binary is no CNI plugin.
func TestInstallPicksTheCNIBuild(t *testing.T) {
	withCNI, alone := t.TempDir(), t.TempDir()
	for _, path := range []string{filepath.Join(withCNI, CNIBinary), filepath.Join(withCNI, AdminBinary), filepath.Join(alone, AdminBinary)} {
		if err := os.WriteFile(path, []byte("#!"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct{ self, want string }{
		{filepath.Join(withCNI, AdminBinary), filepath.Join(withCNI, CNIBinary)},
		{filepath.Join(alone, AdminBinary), ""}, // refused: it would install itself
		{filepath.Join(withCNI, CNIBinary), filepath.Join(withCNI, CNIBinary)},
	}
	for _, tt := range tests {
		got, err := cniBinaryBeside(tt.self)
		if got != tt.want || (tt.want == "") != (err != nil) {
			t.Errorf("cniBinaryBeside(%s) = %s, %v; want %q", tt.self, got, err, tt.want)
		}
	}
}
