//go:build crashpoints

package main

import (
	"os"
	"syscall"

	"github.com/safe-ipam/safe-ipam/ipam/guard"
)

// crashPoint kills the process with SIGKILL at the step named by
// SAFE_IPAM_CRASH_AT, so tests see exactly what a node crash leaves.
// Only builds with -tags crashpoints have it.
func crashPoint(s guard.Step) {
	if os.Getenv("SAFE_IPAM_CRASH_AT") == string(s) {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
