package install

import (
	"os"
	"path/filepath"
	"testing"
)

// Run as safe-ipam-admin, install puts the CNI build beside it on the
// node, not itself: the runtime must run the lean binary.
func TestInstallPicksTheCNIBuild(t *testing.T) {
	withCNI, alone := t.TempDir(), t.TempDir()
	for _, path := range []string{filepath.Join(withCNI, CNIBinary), filepath.Join(withCNI, AdminBinary), filepath.Join(alone, AdminBinary)} {
		if err := os.WriteFile(path, []byte("#!"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct{ self, want string }{
		{filepath.Join(withCNI, AdminBinary), filepath.Join(withCNI, CNIBinary)},
		{filepath.Join(alone, AdminBinary), filepath.Join(alone, AdminBinary)}, // a full build serves CNI too
		{filepath.Join(withCNI, CNIBinary), filepath.Join(withCNI, CNIBinary)},
	}
	for _, tt := range tests {
		if got := cniBinaryBeside(tt.self); got != tt.want {
			t.Errorf("cniBinaryBeside(%s) = %s, want %s", tt.self, got, tt.want)
		}
	}
}
