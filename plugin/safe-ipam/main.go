// Command safe-ipam is the CNI binary: an IPAM plugin that fronts
// calico-ipam and makes DEL safe, so no DEL can release addresses by pod
// name. It links only what a CNI call over the file store needs: every
// linked package's init is paid by every call. A call whose record store
// is etcd it hands to safe-ipam-etcd beside it, the same verbs with the
// etcd client, which also makes its rare reads of Calico's etcd. Run without CNI_COMMAND it answers version
// and help itself and executes safe-ipam-admin from its own directory for
// the other admin commands.
package main

import (
	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/invocation"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	invocation.Main(invocation.Runtime{Backends: invocation.Lean(), Handover: about.EtcdBinary}, Version)
}
