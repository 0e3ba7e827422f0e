package calico

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Key prefixes of Calico's etcdv3 datastore.
const (
	IPAMPrefix   = "/calico/ipam/v2/"
	BlockPrefix  = IPAMPrefix + "assignment/"
	HandlePrefix = IPAMPrefix + "handle/"
	HostPrefix   = IPAMPrefix + "host/"
	IPPoolPrefix = "/calico/resources/v3/projectcalico.org/ippools/"
	NodePrefix   = "/calico/resources/v3/projectcalico.org/nodes/"
)

// Family is an IP address family as Calico spells it in keys.
type Family int

// The two families. The values are the IP versions.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// String returns "ipv4" or "ipv6", the key segment Calico uses.
func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// FamilyOf returns the family of an address.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() || a.Is4In6() {
		return IPv4
	}
	return IPv6
}

func parseFamily(s string) (Family, error) {
	switch s {
	case "ipv4":
		return IPv4, nil
	case "ipv6":
		return IPv6, nil
	}
	return 0, fmt.Errorf("unknown address family %q", s)
}

// BlockFamilyPrefix is the prefix of every block key of one family.
func BlockFamilyPrefix(f Family) string {
	return BlockPrefix + f.String() + "/block/"
}

// BlockKey is the key of the block for cidr, e.g.
// /calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26.
func BlockKey(cidr netip.Prefix) string {
	return BlockFamilyPrefix(FamilyOf(cidr.Addr())) + cidrSegment(cidr)
}

// ParseBlockKey returns the CIDR a block key names.
func ParseBlockKey(key string) (netip.Prefix, error) {
	rest, ok := strings.CutPrefix(key, BlockPrefix)
	if !ok {
		return netip.Prefix{}, fmt.Errorf("not a block key: %q", key)
	}
	fam, seg, ok := strings.Cut(rest, "/block/")
	if !ok {
		return netip.Prefix{}, fmt.Errorf("not a block key: %q", key)
	}
	return parseCIDRSegment(key, fam, seg)
}

// HandleKey is the key of a handle document.
func HandleKey(handle string) string { return HandlePrefix + handle }

// ParseHandleKey returns the handle ID a handle key names.
func ParseHandleKey(key string) (string, error) {
	h, ok := strings.CutPrefix(key, HandlePrefix)
	if !ok || h == "" {
		return "", fmt.Errorf("not a handle key: %q", key)
	}
	return h, nil
}

// HostAffinityPrefix is the prefix of every affinity key of node for one
// family.
func HostAffinityPrefix(node string, f Family) string {
	return HostPrefix + node + "/" + f.String() + "/block/"
}

// AffinityKey is the key recording that node owns the block cidr, e.g.
// /calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26.
func AffinityKey(node string, cidr netip.Prefix) string {
	return HostAffinityPrefix(node, FamilyOf(cidr.Addr())) + cidrSegment(cidr)
}

// ParseAffinityKey returns the node and block CIDR an affinity key names.
func ParseAffinityKey(key string) (node string, cidr netip.Prefix, err error) {
	rest, ok := strings.CutPrefix(key, HostPrefix)
	if !ok {
		return "", netip.Prefix{}, fmt.Errorf("not an affinity key: %q", key)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[0] == "" || parts[2] != "block" {
		return "", netip.Prefix{}, fmt.Errorf("not an affinity key: %q", key)
	}
	cidr, err = parseCIDRSegment(key, parts[1], parts[3])
	if err != nil {
		return "", netip.Prefix{}, err
	}
	return parts[0], cidr, nil
}

// IPPoolKey is the key of the IPPool resource called name.
func IPPoolKey(name string) string { return IPPoolPrefix + name }

// ParseIPPoolKey returns the pool name an IPPool key names.
func ParseIPPoolKey(key string) (string, error) { return parseName(key, IPPoolPrefix, "IPPool") }

// NodeKey is the key of the Node resource called name.
func NodeKey(name string) string { return NodePrefix + name }

// ParseNodeKey returns the node name a Node key names.
func ParseNodeKey(key string) (string, error) { return parseName(key, NodePrefix, "Node") }

func parseName(key, prefix, kind string) (string, error) {
	name, ok := strings.CutPrefix(key, prefix)
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("not a %s key: %q", kind, key)
	}
	return name, nil
}

// cidrSegment writes a CIDR the way keys do: "/" becomes "-".
func cidrSegment(cidr netip.Prefix) string {
	return cidr.Addr().String() + "-" + strconv.Itoa(cidr.Bits())
}

func parseCIDRSegment(key, family, seg string) (netip.Prefix, error) {
	fam, err := parseFamily(family)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("key %q: %w", key, err)
	}
	i := strings.LastIndexByte(seg, '-')
	if i < 0 {
		return netip.Prefix{}, fmt.Errorf("key %q: no prefix length in %q", key, seg)
	}
	cidr, err := netip.ParsePrefix(seg[:i] + "/" + seg[i+1:])
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("key %q: %w", key, err)
	}
	if FamilyOf(cidr.Addr()) != fam {
		return netip.Prefix{}, fmt.Errorf("key %q: %s is not %s", key, cidr, fam)
	}
	return cidr, nil
}
