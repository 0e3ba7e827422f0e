package install

import (
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/bounded/boundedtest"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// Issue 42, item 2: a FIFO where install or uninstall reads a file (a
// kept original or its SHA-256, the node settings, Calico's network
// config, a binary it scans for safe-ipam's mark) holds neither: each
// returns at once, and refuses.
func TestAFIFOHoldsNoInstallOrUninstall(t *testing.T) {
	type verb func(f *fixture, m Mode) error
	install := func(f *fixture, m Mode) error { _, err := Install(f.node, m, f.self, false); return err }
	uninstall := func(f *fixture, m Mode) error { _, err := Uninstall(f.node, m, false); return err }
	tests := []struct {
		name string
		// at is the path replaced by a FIFO, after an install.
		at   func(f *fixture) string
		verb verb
	}{
		{"the kept original's SHA-256, at uninstall", func(f *fixture) string { return sumPath(f.node.bin(CalicoIPAM)) }, uninstall},
		{"the kept original, at uninstall", func(f *fixture) string { return backupPath(f.node.bin(CalicoIPAM)) }, uninstall},
		{"the node settings, at install", func(f *fixture) string { return f.node.bin(config.NodeSettingsFile) }, install},
		{"Calico's network config, at install", func(f *fixture) string { return f.node.conf("10-calico.conflist") }, install},
		{"the installed binary, at install", func(f *fixture) string { return f.node.bin(CalicoIPAM) }, install},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			m := TakeoverMode{}
			if _, err := InstallWith(f.node, m, f.self, Settings{"delegateHandles": "pod"}, false); err != nil {
				t.Fatal(err)
			}
			path := tt.at(f)
			boundedtest.FIFO(t, path)
			if err := boundedtest.Returns(t, tt.name, func() error { return tt.verb(f, m) }); err == nil {
				t.Fatalf("went on over a FIFO at %s", path)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}
