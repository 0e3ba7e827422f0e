//go:build crashpoints

package invocation

import (
	"os"
	"syscall"

	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
)

// CrashPoint kills the process with SIGKILL at the step named by
// SAFE_IPAM_CRASH_AT, so tests see exactly what a node crash leaves.
// With SAFE_IPAM_CRASH_POWER_LOSS=1 the crash is a power loss: the file
// store's writes that are not synced are undone first, as far as their
// durability allows. Only builds with -tags crashpoints have it.
func CrashPoint(s guard.Step) {
	if os.Getenv("SAFE_IPAM_CRASH_AT") != string(s) {
		return
	}
	if os.Getenv("SAFE_IPAM_CRASH_POWER_LOSS") == "1" {
		filestore.DropUnsynced()
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
