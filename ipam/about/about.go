// Package about is what safe-ipam says of itself: the names of its
// programs and the overview and version line they print, so that the CNI
// binary and the admin binary never disagree.
package about

import (
	"fmt"
	"io"
	"strings"
)

// Release is this tree's release: the tag of the image `make image`
// builds and deploy/safe-ipam.yaml runs. Binaries carry the exact build
// (git describe) in their version line.
const Release = "0.3.0"

// Image is the image deploy/ runs, pinned to Release, by its full
// reference: a short name is resolved by each node's runtime
// configuration, which may send it to another registry.
const Image = "ghcr.io/safe-ipam/safe-ipam:" + Release

// CNIVersions are the CNI spec versions the CNI binary speaks.
var CNIVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// Builtin says whether cmd is answered by every program itself.
func Builtin(cmd string) bool {
	switch cmd {
	case "version", "--version", "help", "-h", "--help":
		return true
	}
	return false
}

// Answer prints the version line of program (the build that answers:
// safe-ipam, safe-ipam-etcd or safe-ipam-admin) for version, else the
// overview.
func Answer(w io.Writer, cmd, program, version string) {
	switch cmd {
	case "version", "--version":
		fmt.Fprintf(w, "%s %s (CNI %v)\n", program, version, CNIVersions)
	default:
		fmt.Fprint(w, Usage)
	}
}

// Command is one admin command, as the overview lists it.
type Command struct {
	Name string
	// Summary is its lines in the overview, without the indent.
	Summary []string
}

// Commands are the admin commands, in the overview's order: the one list
// the overview, the admin binary's dispatch and its tests are driven by.
var Commands = []Command{
	{"audit", []string{"report pod-name handles, early releases, duplicates,", "leaks, orphan records and inconsistencies in Calico's", "etcd data (safe-ipam audit -h for flags)"}},
	{"repair", []string{"plan, and with --apply make, only proven fixes"}},
	{"adopt", []string{"give the pods that already run on this node (from the", "CNI cache, --live or --cri-endpoint) records, with the", "handle Calico holds their addresses under; reports", "early releases (--conf FILE, --apply)"}},
	{"gc", []string{"CNI GC where the runtime sends none: release this", "node's records that the runtime (--cri-endpoint) or", "another liveness source does not list (--apply)"}},
	{"install", []string{"put safe-ipam in front of calico-ipam on this node", "(--mode takeover|conflist, --dry-run, --watch to keep", "it there while calico-node re-installs itself)"}},
	{"uninstall", []string{"take it off again, restoring what install replaced"}},
	{"doctor", []string{"is this node protected? exit 0 yes, 1 not installed,", "3 installed but broken, 2 cannot tell"}},
	{"detect", []string{"cluster-wide: report pods sharing an address, Calico", "annotations that differ from status.podIPs, and", "addresses held for pods long gone (--every to keep at it)"}},
}

// Usage is the overview of every command.
var Usage = usage()

func usage() string {
	var b strings.Builder
	b.WriteString(`safe-ipam: a CNI IPAM plugin in front of calico-ipam that makes DEL safe.

As a CNI plugin it is run by the container runtime with CNI_COMMAND set
(ADD, DEL, CHECK, GC, STATUS, VERSION) and its config on stdin.

Admin commands (CNI_COMMAND unset):
`)
	line := func(name string, summary []string) {
		for i, s := range summary {
			if i == 0 {
				fmt.Fprintf(&b, "  %-22s%s\n", "safe-ipam "+name, s)
				continue
			}
			fmt.Fprintf(&b, "  %-22s%s\n", "", s)
		}
	}
	for _, c := range Commands {
		line(c.Name, c.Summary)
	}
	line("version", []string{"print the version and the CNI versions it speaks"})
	line("help", []string{"this text"})
	return b.String()
}
