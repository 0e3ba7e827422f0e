package adopt

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Holders is what Calico's data says of each address: the handle that
// holds it (absent: free), and the blocks, whose masks calico-ipam puts
// in its results.
type Holders struct {
	byAddr map[netip.Addr]string
	blocks []netip.Prefix
}

// HoldersFrom indexes an audit snapshot of Calico's IPAM data.
func HoldersFrom(snap *snapshot.Snapshot) Holders {
	h := Holders{byAddr: map[netip.Addr]string{}}
	for _, al := range snap.Allocations.All() {
		h.byAddr[al.Addr] = al.Handle
	}
	for cidr := range snap.Blocks {
		h.blocks = append(h.blocks, cidr)
	}
	return h
}

// HandleOf is the handle that really holds the attachment's addresses,
// when it is one of the attachment's own: `<network>.<containerID>`
// (Calico 3.x), the bare container ID (Calico 2.x without pod identity),
// or the pod's `namespace.podname` (Calico 2.x with it), or, for a
// KubeVirt virt-launcher pod, its VM's handle (record.VMPodHandle).
// Otherwise, when every address is free or another's, it is fallback:
// the handle the plugin's own ADD would use, which its DEL releases.
func (h Holders) HandleOf(att record.Attachment, a liveness.Running, addrs []netip.Addr, fallback string) string {
	own := []string{att.Network + "." + att.ContainerID, att.ContainerID}
	if a.PodNamespace != "" && a.PodName != "" {
		own = append(own, a.PodNamespace+"."+a.PodName)
	}
	for _, addr := range addrs {
		handle, ok := h.byAddr[addr]
		if ok && (slices.Contains(own, handle) || record.VMPodHandle(att.Network, a.PodNamespace, a.PodName, handle)) {
			return handle
		}
	}
	return fallback
}

// NotHeldBy says which of addrs handle does not hold in Calico and what
// holds them instead; "" when it holds them all.
func (h Holders) NotHeldBy(addrs []netip.Addr, handle string) string {
	var parts []string
	for _, addr := range addrs {
		holder, ok := h.byAddr[addr]
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("Calico has %s free", addr))
		case holder != handle:
			parts = append(parts, fmt.Sprintf("Calico gave %s to handle %s", addr, holder))
		}
	}
	return strings.Join(parts, "; ")
}

// Prefixes gives each address its mask: as the source wrote it, else the
// mask of the Calico block it is in (calico-ipam's results carry it),
// else a host mask.
func (h Holders) Prefixes(addrs []netip.Addr, given []string) []netip.Prefix {
	out := make([]netip.Prefix, len(addrs))
	for i, addr := range addrs {
		if pfx, err := netip.ParsePrefix(given[i]); err == nil {
			out[i] = pfx
			continue
		}
		out[i] = netip.PrefixFrom(addr, addr.BitLen())
		for _, b := range h.blocks {
			if b.Contains(addr) {
				out[i] = netip.PrefixFrom(addr, b.Bits())
				break
			}
		}
	}
	return out
}

// ipamResult is the record's result: what the delegate's ADD returned, as
// far as the runtime's cache kept it. The cache holds the whole chain's
// result, so the interfaces the main plugin added are dropped: an IPAM
// result names none. Without a cached result, the addresses alone.
func ipamResult(cached []byte, prefixes []netip.Prefix) ([]byte, error) {
	if len(cached) == 0 {
		res := &types100.Result{CNIVersion: "1.0.0"}
		for _, pfx := range prefixes {
			res.IPs = append(res.IPs, &types100.IPConfig{Address: ipNet(pfx)})
		}
		return json.Marshal(res)
	}
	parsed, err := create.CreateFromBytes(cached)
	if err != nil {
		return nil, err
	}
	res, err := asV100(parsed)
	if err != nil {
		return nil, err
	}
	out := *res
	out.Interfaces = nil
	out.IPs = make([]*types100.IPConfig, len(res.IPs))
	for i, ip := range res.IPs {
		c := *ip
		c.Interface = nil
		out.IPs[i] = &c
	}
	return json.Marshal(&out)
}

// asV100 converts a result to 1.0.0's form (1.1.0 shares it).
func asV100(res types.Result) (*types100.Result, error) {
	if r, ok := res.(*types100.Result); ok {
		return r, nil
	}
	conv, err := res.GetAsVersion("1.0.0")
	if err != nil {
		return nil, err
	}
	r, ok := conv.(*types100.Result)
	if !ok {
		return nil, fmt.Errorf("unexpected result type %T", conv)
	}
	return r, nil
}

func ipNet(pfx netip.Prefix) net.IPNet {
	return net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen())}
}
