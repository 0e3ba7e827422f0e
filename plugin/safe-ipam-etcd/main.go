// Command safe-ipam-etcd is the CNI binary's build with the etcd client
// (package builds says why there are three builds): the same verbs as
// safe-ipam, which hands it every call whose record store is etcd and
// each of its rare reads of Calico's etcd. Install puts it beside the CNI
// binary, and makes it the CNI binary of a node whose records are in
// etcd. Run without CNI_COMMAND it answers as safe-ipam does.
package main

import (
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/cni/backends"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

// mark keeps builds.Mark in this binary: releases before it existed tell
// safe-ipam's binaries by their main package or by the Mark, and know no
// plugin/safe-ipam-etcd; without it, such a release rolled back onto a
// node would take this build for Calico's binary and keep it as the
// original to restore.
var mark = []byte(builds.Mark)

func main() {
	invocation.Main(invocation.Verbs{Program: builds.EtcdBinary, Backends: backends.Full()}, Version+string(mark[:0]))
}
