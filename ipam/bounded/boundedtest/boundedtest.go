// Package boundedtest plants what a hostile or broken node puts where
// safe-ipam reads (a FIFO) and checks that the read returns at once.
package boundedtest

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// Limit is how long a read may take before it counts as blocked: far
// above any read of a local file, far below a test's deadline.
const Limit = 5 * time.Second

// FIFO replaces whatever is at path with a FIFO no process writes.
func FIFO(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Returns runs read and returns its error, failing the test when read
// still blocks after Limit (a blocking open of a FIFO never returns).
func Returns(t *testing.T, what string, read func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- read() }()
	select {
	case err := <-done:
		return err
	case <-time.After(Limit):
		t.Fatalf("%s still blocks after %s", what, Limit)
		return nil
	}
}
