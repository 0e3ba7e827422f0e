package cachedir_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cachedir"
)

// Uninstall waits for the CNI calls at work (a shared lock each) before
// it lists the records, and gives up when its time is out; calls hold the
// lock together.
func TestWaitForCalls(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	first, second := cachedir.HoldCall(dir), cachedir.HoldCall(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := cachedir.WaitForCalls(ctx, dir); err == nil {
		t.Fatal("WaitForCalls returned while two calls held the dir")
	}
	done := make(chan error, 1)
	go func() { done <- cachedir.WaitForCalls(context.Background(), dir) }()
	first()
	select {
	case err := <-done:
		t.Fatalf("WaitForCalls returned (%v) while a call still held the dir", err)
	case <-time.After(200 * time.Millisecond):
	}
	second()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitForCalls still waits once every call ended")
	}
}
