// Command safe-ipam is the CNI binary: an IPAM plugin that fronts
// calico-ipam and makes DEL safe, so no DEL can release addresses by pod
// name. It is the lean build of the three (package builds says why and
// how they reach one another): the verbs over the file store.
package main

import (
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	invocation.Main(invocation.Verbs{Program: builds.CNIBinary, Backends: invocation.Lean(), HandOverTo: builds.EtcdBinary}, Version)
}
