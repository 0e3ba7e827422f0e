// Command calico-ipam stands in for Calico's calico-ipam CNI plugin in
// tests: same config keys, results, errors and data, in etcdv3 or the
// Kubernetes datastore as the config says (see package calicosim).
// Install it in CNI_PATH under the name calico-ipam.
//
// Like Calico's one multi-call binary, it picks its role from the base of
// argv[0]: calico-node's installer copies that binary as both "calico" and
// "calico-ipam". As "calico" it stands in for Calico's main plugin: it runs
// the IPAM plugin its ipam.type names with the whole network config (which
// is how Calico's plugin reaches calico-ipam), then gives the pod its
// interface as Calico does: a veth whose host end is named after the pod,
// the address on the pod's end behind a link-local gateway, and a /32 route
// on the host, refused when the address already routes to another pod. If
// the interface cannot be made, the address is released again. Every
// other name is the IPAM simulator.
//
// Besides the CNI variables it reads CALICO_IPAM_LOCK_FILE (host lock,
// default /var/run/calico/ipam.lock, "none" to skip), CALICO_SIM_HANDLES
// ("modern" Calico 3.x handles, the default, or "legacy" Calico 2.x pod-name
// handles), CALICO_SIM_TIMEOUT (per-command bound, default 30s) and
// CALICO_SIM_CALL_LOG (a file it appends each ADD and DEL to, with who ran
// it: safe-ipam, or Calico's main plugin alone).
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
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
)

// mainPluginRole is the argv[0] under which Calico's binary is its main
// plugin.
const mainPluginRole = "calico"

func main() {
	if filepath.Base(os.Args[0]) == mainPluginRole {
		skel.PluginMainFuncs(skel.CNIFuncs{Add: mainAdd, Del: mainDel, Check: mainCheck}, calicosim.Versions(),
			"calico main plugin stand-in (safe-ipam e2e): its ipam.type, then a veth")
		return
	}
	if err := calicosim.LogCall(os.Getenv); err != nil {
		_ = types.NewError(types.ErrInternal, "calico-ipam simulator", err.Error()).Print()
		os.Exit(1)
	}
	p := calicosim.New(os.Getenv, os.Stdout, os.Stderr)
	skel.PluginMainFuncs(p.Funcs(), calicosim.Versions(), calicosim.About)
}

// netConf is what the main plugin reads of its config.
type netConf struct {
	types.NetConf
	MTU int `json:"mtu"`
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
// does, wires the pod, and returns the result in the config's version.
func mainAdd(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	var k8s podArgs
	if err := types.LoadArgs(args.Args, &k8s); err != nil {
		return fmt.Errorf("CNI_ARGS: %w", err)
	}
	ctx := context.Background()
	raw, err := invoke.DelegateAdd(ctx, c.IPAM.Type, args.StdinData, nil)
	if err != nil {
		return err
	}
	res, err := current.NewResultFromResult(raw)
	if err != nil {
		return fmt.Errorf("the IPAM result: %w", err)
	}
	mtu := c.MTU
	if mtu == 0 {
		mtu = 1500
	}
	err = wire(args.Netns, args.IfName, hostVethName(args.ContainerID, k8s), mtu, res)
	if err == nil {
		err = annotatePod(args.StdinData, k8s, args.ContainerID, res)
	}
	if err != nil {
		// Calico releases what it allocated when the dataplane fails.
		if derr := invoke.DelegateDel(ctx, c.IPAM.Type, args.StdinData, nil); derr != nil {
			return fmt.Errorf("%w (and releasing the address: %v)", err, derr)
		}
		return err
	}
	return types.PrintResult(res, c.CNIVersion)
}

// mainDel removes the pod's interface, then releases through the IPAM.
func mainDel(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	if err := unwire(args.Netns, args.IfName); err != nil {
		return err
	}
	var k8s podArgs
	if err := types.LoadArgs(args.Args, &k8s); err != nil {
		return fmt.Errorf("CNI_ARGS: %w", err)
	}
	if err := unannotatePod(args.StdinData, k8s, args.ContainerID); err != nil {
		return err
	}
	return invoke.DelegateDel(context.Background(), c.IPAM.Type, args.StdinData, nil)
}

// mainCheck passes: Calico's CHECK is not modelled.
func mainCheck(args *skel.CmdArgs) error {
	_, err := parse(args.StdinData)
	return err
}
