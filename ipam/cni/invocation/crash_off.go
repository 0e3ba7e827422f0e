//go:build !crashpoints

package invocation

import "github.com/safe-ipam/safe-ipam/ipam/cni/guard"

// CrashPoint is a no-op outside crash-test builds: Verbs.At.
var CrashPoint func(guard.Step)
