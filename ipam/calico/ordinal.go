package calico

import (
	"fmt"
	"net/netip"
)

// maxHostBits bounds block sizes. Calico's blocks are /20../32 for IPv4
// and /116../128 for IPv6; the bound keeps a corrupt prefix from making
// us allocate huge slices.
const maxHostBits = 20

// Ordinals returns the number of addresses in a block.
func Ordinals(cidr netip.Prefix) (int, error) {
	if !cidr.IsValid() {
		return 0, fmt.Errorf("invalid block CIDR %v", cidr)
	}
	host := cidr.Addr().BitLen() - cidr.Bits()
	if host > maxHostBits {
		return 0, fmt.Errorf("block %s has %d host bits, more than %d", cidr, host, maxHostBits)
	}
	return 1 << host, nil
}

// OrdinalToIP returns the ord-th address of the block cidr.
func OrdinalToIP(cidr netip.Prefix, ord int) (netip.Addr, error) {
	n, err := Ordinals(cidr)
	if err != nil {
		return netip.Addr{}, err
	}
	if ord < 0 || ord >= n {
		return netip.Addr{}, fmt.Errorf("ordinal %d outside block %s", ord, cidr)
	}
	b := cidr.Masked().Addr().AsSlice()
	carry := uint64(ord)
	for i := len(b) - 1; i >= 0 && carry > 0; i-- {
		sum := uint64(b[i]) + carry&0xff
		b[i] = byte(sum)
		carry = carry>>8 + sum>>8
	}
	ip, _ := netip.AddrFromSlice(b)
	return ip, nil
}

// IPToOrdinal returns the position of ip in the block cidr.
func IPToOrdinal(cidr netip.Prefix, ip netip.Addr) (int, error) {
	if _, err := Ordinals(cidr); err != nil {
		return 0, err
	}
	if !cidr.Contains(ip) {
		return 0, fmt.Errorf("%s is not in block %s", ip, cidr)
	}
	// Host bits fit in the last three bytes (maxHostBits), so the
	// difference of the low 32 bits is the ordinal.
	return int(low32(ip) - low32(cidr.Masked().Addr())), nil
}

func low32(a netip.Addr) uint32 {
	b := a.AsSlice()
	b = b[len(b)-4:]
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Block sizes Calico allows (an IPv4 block is a /20 to a /32, an IPv6
// block a /116 to a /128), and its defaults.
const (
	minBlockBits4, defaultBlockBits4 = 20, 26
	minBlockBits6, defaultBlockBits6 = 116, 122
)

// BlockCandidates are the blocks that may hold ip, one per block size
// Calico allows, the default size first.
func BlockCandidates(ip netip.Addr) []netip.Prefix {
	ip = ip.Unmap()
	first, def := minBlockBits4, defaultBlockBits4
	if ip.Is6() {
		first, def = minBlockBits6, defaultBlockBits6
	}
	out := []netip.Prefix{netip.PrefixFrom(ip, def).Masked()}
	for bits := first; bits <= ip.BitLen(); bits++ {
		if bits != def {
			out = append(out, netip.PrefixFrom(ip, bits).Masked())
		}
	}
	return out
}
