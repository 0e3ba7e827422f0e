package builds

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/nodefile"
	"github.com/safe-ipam/safe-ipam/ipam/nodefile/nodefiletest"
)

// Issue 42, item 2: the scan for safe-ipam's mark (install, uninstall,
// doctor) refuses a FIFO at once rather than wait for a writer.
func TestTheMarkScanNeverWaitsOnAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "calico-ipam")
	nodefiletest.FIFO(t, fifo)
	err := nodefiletest.Returns(t, "IsSafeIPAM", func() error { _, err := IsSafeIPAM(fifo); return err })
	if !errors.Is(err, nodefile.ErrNotRegular) {
		t.Fatalf("IsSafeIPAM(FIFO) = %v; want a refusal", err)
	}
}
