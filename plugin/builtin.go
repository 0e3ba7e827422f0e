package main

import (
	"fmt"
	"os"
)

// runBuiltin answers the commands both builds answer themselves.
func runBuiltin(cmd string) int {
	switch cmd {
	case "version", "--version":
		fmt.Printf("safe-ipam %s (CNI %v)\n", Version, supported.SupportedVersions())
	default:
		fmt.Fprint(os.Stdout, usage)
	}
	return 0
}

const usage = `safe-ipam: a CNI IPAM plugin in front of calico-ipam that makes DEL safe.

As a CNI plugin it is run by the container runtime with CNI_COMMAND set
(ADD, DEL, CHECK, GC, STATUS, VERSION) and its config on stdin.

Admin commands (CNI_COMMAND unset):
  safe-ipam audit       report pod-name handles, early releases, duplicates,
                        leaks, orphan records and inconsistencies in Calico's
                        etcd data (safe-ipam audit -h for flags)
  safe-ipam repair      plan, and with --apply make, only proven fixes
  safe-ipam adopt       give the pods that already run on this node (from the
                        CNI cache, --live or --cri-endpoint) records, with the
                        handle Calico holds their addresses under; reports
                        early releases (--conf FILE, --apply)
  safe-ipam gc          CNI GC where the runtime sends none: release this
                        node's records that the runtime (--cri-endpoint) or
                        another liveness source does not list (--apply)
  safe-ipam install     put safe-ipam in front of calico-ipam on this node
                        (--mode takeover|conflist, --dry-run, --watch to keep
                        it there while calico-node re-installs itself)
  safe-ipam uninstall   take it off again, restoring what install replaced
  safe-ipam doctor      is this node protected? exit 0 yes, 1 no, 2 error
  safe-ipam version     print the version and the CNI versions it speaks
  safe-ipam help        this text
`
