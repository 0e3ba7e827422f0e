// Command safe-ipam-etcd is the CNI binary's build with the etcd client:
// the same verbs as safe-ipam, which hands it every call whose config
// names etcd (the record store, or Calico's datastore), so that the calls
// that do not reach etcd never pay the client's package init. Install
// puts it beside safe-ipam; a runtime may also run it directly. Run
// without CNI_COMMAND it answers as safe-ipam does.
package main

import (
	"github.com/safe-ipam/safe-ipam/ipam/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	invocation.Main(invocation.Runtime{Backends: opener.Backends()}, Version)
}
