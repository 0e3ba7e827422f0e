// Command safe-ipam is the CNI binary: an IPAM plugin that fronts
// calico-ipam and makes DEL safe, so no DEL can release addresses by pod
// name. It links only what a CNI call needs (the admin commands bring the
// Kubernetes and CRI clients, whose package init every CNI call would
// pay). Run without CNI_COMMAND it answers version and help itself and
// executes safe-ipam-admin from its own directory for the other admin
// commands.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

var supported = version.PluginSupports(about.CNIVersions...)

func main() {
	rt := invocation.Runtime{Trace: logging.NewTrace(), At: crashPoint} // the trace first: exec and init are done
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(runAdmin(os.Args[1:]))
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: rt.Add, Del: rt.Del, Check: rt.Check, GC: rt.GC, Status: rt.Status},
		supported, "safe-ipam "+Version+": CNI IPAM in front of calico-ipam; run 'safe-ipam --help' for admin commands")
}
