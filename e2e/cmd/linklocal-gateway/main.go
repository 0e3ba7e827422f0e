// Command linklocal-gateway is a test-only IPAM adapter that lets the
// standard ptp plugin carry calico-ipam's results.
//
// calico-ipam returns an address with its block's mask and no gateway,
// because Calico's own interface plugin routes every pod through the
// link-local gateway 169.254.1.1. ptp instead needs a gateway in the IPAM
// result and fails without one. This adapter sits between ptp and the IPAM
// under test (calico-ipam, or safe-ipam in front of it), passes every
// command through unchanged, and on ADD gives each IPv4 address Calico's
// gateway. It drops the result's routes: ptp installs the route to the
// address's subnet itself, via the gateway, and a route via a gateway the
// container cannot reach yet would make ptp's ADD fail. An address with a
// host mask (a KubeVirt VM's, reused) is given to ptp as a /31.
//
// Config, in the interface plugin's ipam section:
//
//	"ipam": {"type": "linklocal-gateway", "wraps": "safe-ipam", ...}
//
// The wrapped plugin receives the same config with ipam.type set to the
// value of "wraps" and "wraps" removed, so it sees exactly what it would
// see as the interface plugin's IPAM.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// calicoGateway is the address Calico's interface plugin routes pods through.
var calicoGateway = net.IPv4(169, 254, 1, 1)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    add,
		Del:    passThrough(func(ctx context.Context, t string, c []byte) error { return invoke.DelegateDel(ctx, t, c, nil) }),
		Check:  passThrough(func(ctx context.Context, t string, c []byte) error { return invoke.DelegateCheck(ctx, t, c, nil) }),
		GC:     passThrough(func(ctx context.Context, t string, c []byte) error { return invoke.DelegateGC(ctx, t, c, nil) }),
		Status: passThrough(func(ctx context.Context, t string, c []byte) error { return invoke.DelegateStatus(ctx, t, c, nil) }),
	}, version.All, "linklocal-gateway: gives calico-ipam results the gateway ptp needs (test only)")
}

func add(args *skel.CmdArgs) error {
	wrapped, conf, cniVersion, err := wrappedConfig(args.StdinData)
	if err != nil {
		return err
	}
	r, err := invoke.DelegateAdd(context.Background(), wrapped, conf, nil)
	if err != nil {
		return err
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return fmt.Errorf("converting %s result: %w", wrapped, err)
	}
	for _, ipc := range res.IPs {
		if ipc.Gateway == nil && ipc.Address.IP.To4() != nil {
			ipc.Gateway = calicoGateway
		}
		// calico-ipam gives a KubeVirt VM's reused address a host mask;
		// ptp deletes the subnet route the kernel adds with the address,
		// and a /32 gets none.
		if ones, bits := ipc.Address.Mask.Size(); ipc.Address.IP.To4() != nil && ones == bits {
			ipc.Address.Mask = net.CIDRMask(31, 32)
		}
	}
	res.Routes = nil
	return types.PrintResult(res, cniVersion)
}

// passThrough runs a command that returns no result on the wrapped plugin.
func passThrough(call func(ctx context.Context, pluginType string, conf []byte) error) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error {
		wrapped, conf, _, err := wrappedConfig(args.StdinData)
		if err != nil {
			return err
		}
		return call(context.Background(), wrapped, conf)
	}
}

// wrappedConfig returns the wrapped plugin's type and the config it gets.
func wrappedConfig(stdin []byte) (wrapped string, conf []byte, cniVersion string, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &top); err != nil {
		return "", nil, "", types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding config: %v", err), "")
	}
	if v, ok := top["cniVersion"]; ok {
		if err := json.Unmarshal(v, &cniVersion); err != nil {
			return "", nil, "", types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding cniVersion: %v", err), "")
		}
	}
	var ipam map[string]json.RawMessage
	if err := json.Unmarshal(top["ipam"], &ipam); err != nil || ipam == nil {
		return "", nil, "", types.NewError(types.ErrInvalidNetworkConfig, "ipam section missing or not an object", "")
	}
	if err := json.Unmarshal(ipam["wraps"], &wrapped); err != nil || wrapped == "" {
		return "", nil, "", types.NewError(types.ErrInvalidNetworkConfig, `ipam.wraps must name the IPAM plugin to wrap`, "")
	}
	delete(ipam, "wraps")
	ipam["type"], _ = json.Marshal(wrapped)
	top["ipam"], _ = json.Marshal(ipam)
	conf, err = json.Marshal(top)
	if err != nil {
		return "", nil, "", fmt.Errorf("encoding config for %s: %w", wrapped, err)
	}
	return wrapped, conf, cniVersion, nil
}
