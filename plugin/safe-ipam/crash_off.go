//go:build !crashpoints

package main

import "github.com/safe-ipam/safe-ipam/ipam/guard"

// crashPoint is a no-op outside crash-test builds.
var crashPoint func(guard.Step)
