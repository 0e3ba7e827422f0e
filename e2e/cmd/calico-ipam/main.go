// Command calico-ipam stands in for Calico's calico-ipam CNI plugin in
// tests: same config keys, results, errors and data, in etcdv3 or the
// Kubernetes datastore as the config says (see package calicosim).
// Install it in CNI_PATH under the name calico-ipam.
//
// Like Calico's one multi-call binary, it picks its role from the base of
// argv[0]: calico-node's installer copies that binary as both "calico" and
// "calico-ipam". As "calico" it is a minimal stand-in for Calico's main
// plugin: it runs the IPAM plugin its ipam.type names (which is how
// Calico's plugin reaches calico-ipam) and sets up no dataplane. Every
// other name is the IPAM simulator.
//
// Besides the CNI variables it reads CALICO_IPAM_LOCK_FILE (host lock,
// default /var/run/calico/ipam.lock, "none" to skip), CALICO_SIM_HANDLES
// ("modern" Calico 3.x handles, the default, or "legacy" Calico 2.x pod-name
// handles) and CALICO_SIM_TIMEOUT (per-command bound, default 30s).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
)

// mainPluginRole is the argv[0] under which Calico's binary is its main
// plugin.
const mainPluginRole = "calico"

func main() {
	if filepath.Base(os.Args[0]) == mainPluginRole {
		skel.PluginMainFuncs(skel.CNIFuncs{Add: mainAdd, Del: mainDel, Check: mainCheck}, calicosim.Versions(),
			"calico main plugin stand-in (safe-ipam e2e): delegates to its ipam.type, no dataplane")
		return
	}
	p := calicosim.New(os.Getenv, os.Stdout, os.Stderr)
	skel.PluginMainFuncs(p.Funcs(), calicosim.Versions(), calicosim.About)
}

// netConf is what the main plugin reads of its config.
type netConf struct {
	types.NetConf
}

func parse(stdin []byte) (*netConf, error) {
	var c netConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("decoding config: %w", err)
	}
	if c.IPAM.Type == "" {
		return nil, fmt.Errorf("config has no ipam.type")
	}
	return &c, nil
}

// mainAdd hands the whole config to the IPAM plugin, as Calico's plugin
// does, and returns its result in the config's version.
func mainAdd(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	res, err := invoke.DelegateAdd(context.Background(), c.IPAM.Type, args.StdinData, nil)
	if err != nil {
		return err
	}
	return types.PrintResult(res, c.CNIVersion)
}

func mainDel(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	return invoke.DelegateDel(context.Background(), c.IPAM.Type, args.StdinData, nil)
}

// mainCheck passes: there is no dataplane to check.
func mainCheck(args *skel.CmdArgs) error {
	_, err := parse(args.StdinData)
	return err
}
