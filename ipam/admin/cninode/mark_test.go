package cninode

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/bounded/boundedtest"
)

// Issue 42, item 2: the scan for safe-ipam's mark (install, uninstall,
// doctor) refuses a FIFO at once rather than wait for a writer.
func TestTheMarkScanNeverWaitsOnAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "calico-ipam")
	boundedtest.FIFO(t, fifo)
	err := boundedtest.Returns(t, "IsSafeIPAM", func() error { _, err := IsSafeIPAM(fifo); return err })
	if !errors.Is(err, bounded.ErrNotRegular) {
		t.Fatalf("IsSafeIPAM(FIFO) = %v; want a refusal", err)
	}
}
