// Command calico-ipam stands in for Calico's calico-ipam CNI plugin in
// tests: same config keys, results, errors and etcd layout (see package
// calicosim). Install it in CNI_PATH under the name calico-ipam.
//
// Besides the CNI variables it reads CALICO_IPAM_LOCK_FILE (host lock,
// default /var/run/calico/ipam.lock, "none" to skip), CALICO_SIM_HANDLES
// ("modern" Calico 3.x handles, the default, or "legacy" Calico 2.x pod-name
// handles) and CALICO_SIM_TIMEOUT (per-command bound, default 30s).
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/safe-ipam/safe-ipam/e2e/calicosim"
)

func main() {
	p := calicosim.New(os.Getenv, os.Stdout, os.Stderr)
	skel.PluginMainFuncs(p.Funcs(), calicosim.Versions(), calicosim.About)
}
