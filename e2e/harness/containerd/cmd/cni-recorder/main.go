// Command cni-recorder is a CNI plugin for the end of a test chain: it
// appends every call it gets (command, container, netns, ifname,
// CNI_ARGS, whether a prevResult came) as a JSON line to the file its
// config names, and passes prevResult on. With "failAdd" its ADD fails,
// as a plugin later in the chain than IPAM can.
package main

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd/calls"
)

type conf struct {
	types.NetConf
	Record  string `json:"record"`
	FailAdd bool   `json:"failAdd"`
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    func(a *skel.CmdArgs) error { return run("ADD", a) },
		Del:    func(a *skel.CmdArgs) error { return run("DEL", a) },
		Check:  func(a *skel.CmdArgs) error { return run("CHECK", a) },
		GC:     func(a *skel.CmdArgs) error { return run("GC", a) },
		Status: func(a *skel.CmdArgs) error { return run("STATUS", a) },
	}, version.All, "cni-recorder: records CNI calls for the runtime suite")
}

func run(command string, args *skel.CmdArgs) error {
	var c conf
	if err := json.Unmarshal(args.StdinData, &c); err != nil {
		return types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	if c.Record == "" {
		return types.NewError(types.ErrInvalidNetworkConfig, "record: missing", "")
	}
	call := calls.Call{Command: command, ContainerID: args.ContainerID, NetNS: args.Netns, IfName: args.IfName,
		Args: args.Args, PrevResult: c.RawPrevResult != nil}
	if err := calls.Append(c.Record, call); err != nil {
		return types.NewError(types.ErrInternal, err.Error(), "")
	}
	if command != "ADD" {
		return nil
	}
	if c.FailAdd {
		return types.NewError(types.ErrInternal, "cni-recorder: failing ADD as configured (failAdd)", "")
	}
	if err := version.ParsePrevResult(&c.NetConf); err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	if c.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "ADD without prevResult: cni-recorder must follow a plugin that sets up the interface", "")
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}
