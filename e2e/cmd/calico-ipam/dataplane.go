package main

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
)

// gateway is the link-local next hop every pod routes through. Calico's
// pods do the same: the host answers ARP for it on the pod's veth (proxy
// ARP), so no address is spent on a gateway.
var gateway = net.IPv4(169, 254, 1, 1)

// hostVethName is the host end's name, from the pod's identity when the
// runtime gives one, as Calico names it: a pod recreated under the same
// name gets the same host veth, so its ADD replaces the old one's.
func hostVethName(containerID string, k8s podArgs) string {
	id := containerID
	if k8s.K8S_POD_NAME != "" {
		id = string(k8s.K8S_POD_NAMESPACE) + "." + string(k8s.K8S_POD_NAME)
	}
	sum := sha1.Sum([]byte(id))
	return "cali" + hex.EncodeToString(sum[:])[:11]
}

// wire gives the pod its interface: a veth pair, the addresses of res on
// the pod's end with a default route through gateway, and on the host a
// /32 route to each address through the host end. A route to an address
// that already goes to another interface is refused, as Calico refuses it:
// the address is another pod's.
func wire(netnsPath, ifName, hostName string, mtu int, res *current.Result) error {
	podNS, err := ns.GetNS(netnsPath)
	if err != nil {
		return fmt.Errorf("opening the pod's netns %s: %w", netnsPath, err)
	}
	defer podNS.Close()
	hostNS, err := ns.GetCurrentNS()
	if err != nil {
		return err
	}
	defer hostNS.Close()
	// A pod recreated under the same name: its old host end goes.
	if old, err := netlink.LinkByName(hostName); err == nil {
		if err := netlink.LinkDel(old); err != nil {
			return fmt.Errorf("removing the old host veth %s: %w", hostName, err)
		}
	}
	var hostIf, podIf net.Interface
	if err := podNS.Do(func(ns.NetNS) error {
		if hostIf, podIf, err = ip.SetupVethWithName(ifName, hostName, mtu, "", hostNS); err != nil {
			return err
		}
		return podSide(ifName, res)
	}); err != nil {
		return fmt.Errorf("setting up %s in %s: %w", ifName, netnsPath, err)
	}
	res.Interfaces = []*current.Interface{
		{Name: hostIf.Name, Mac: hostIf.HardwareAddr.String()},
		{Name: podIf.Name, Mac: podIf.HardwareAddr.String(), Sandbox: netnsPath},
	}
	for _, c := range res.IPs {
		c.Interface = current.Int(1)
	}
	return hostSide(hostName, res)
}

// podSide puts the addresses on the pod's end and routes through gateway.
func podSide(ifName string, res *current.Result) error {
	link, err := netlink.LinkByName(ifName)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting %s up: %w", ifName, err)
	}
	for _, c := range res.IPs {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: c.Address.IP, Mask: net.CIDRMask(32, 32)}}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("adding %s: %w", addr.IPNet, err)
		}
	}
	gw := &net.IPNet{IP: gateway, Mask: net.CIDRMask(32, 32)}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: gw, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to %s: %w", gateway, err)
	}
	if err := ip.AddDefaultRoute(gateway, link); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return nil
}

// hostSide answers ARP for gateway on the host end and routes each address
// to it.
func hostSide(hostName string, res *current.Result) error {
	link, err := netlink.LinkByName(hostName)
	if err != nil {
		return err
	}
	if _, err := sysctl.Sysctl("net/ipv4/conf/"+hostName+"/proxy_arp", "1"); err != nil {
		return fmt.Errorf("proxy ARP on %s: %w", hostName, err)
	}
	for _, c := range res.IPs {
		dst := &net.IPNet{IP: c.Address.IP, Mask: net.CIDRMask(32, 32)}
		if err := hostRoute(link, dst); err != nil {
			return err
		}
	}
	return nil
}

func hostRoute(link netlink.Link, dst *net.IPNet) error {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
	if err != nil {
		return fmt.Errorf("listing routes to %s: %w", dst, err)
	}
	for _, r := range routes {
		if r.LinkIndex != link.Attrs().Index {
			return fmt.Errorf("route (Dst: %s) already exists for an interface other than %q", dst, link.Attrs().Name)
		}
		return nil
	}
	return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK})
}

// unwire removes the pod's end, and with it the host end and its routes.
// A netns that is already gone leaves nothing to remove.
func unwire(netnsPath, ifName string) error {
	if netnsPath == "" {
		return nil
	}
	podNS, err := ns.GetNS(netnsPath)
	if err != nil {
		var notFound ns.NSPathNotExistErr
		if errors.As(err, &notFound) || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("opening the pod's netns %s: %w", netnsPath, err)
	}
	defer podNS.Close()
	return podNS.Do(func(ns.NetNS) error {
		if err := ip.DelLinkByName(ifName); err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
			return fmt.Errorf("removing %s: %w", ifName, err)
		}
		return nil
	})
}

// podArgs are the Kubernetes keys of CNI_ARGS (types.LoadArgs matches
// field names).
type podArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME      types.UnmarshallableString //nolint:revive // CNI_ARGS key
}
