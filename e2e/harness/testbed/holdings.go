package testbed

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// Holdings is what the sandboxes' netns really hold, read with
// `ip -o addr` inside each: the other half of the ground truth, next to
// Calico's data.
type Holdings struct {
	order []Sandbox
	addrs map[Sandbox][]netip.Addr
}

// Observe reads the IPv4 addresses of every sandbox's netns.
func Observe(ctx context.Context, sandboxes []Sandbox) (Holdings, error) {
	h := Holdings{addrs: map[Sandbox][]netip.Addr{}}
	for _, sb := range sandboxes {
		prefixes, err := sb.Netns.IPv4Addrs(ctx)
		if err != nil {
			return Holdings{}, fmt.Errorf("reading addresses of %s (%s): %w", sb.Pod, sb.Netns.Name, err)
		}
		h.order = append(h.order, sb)
		for _, p := range prefixes {
			h.addrs[sb] = append(h.addrs[sb], p.Addr())
		}
	}
	return h, nil
}

// Addrs returns the addresses one sandbox holds.
func (h Holdings) Addrs(sb Sandbox) []netip.Addr { return h.addrs[sb] }

// Holders returns every sandbox holding addr, in observation order.
func (h Holdings) Holders(addr netip.Addr) []Sandbox {
	var out []Sandbox
	for _, sb := range h.order {
		if slices.Contains(h.addrs[sb], addr) {
			out = append(out, sb)
		}
	}
	return out
}

// Duplicates returns each address held by more than one sandbox.
func (h Holdings) Duplicates() map[netip.Addr][]Sandbox {
	dups := map[netip.Addr][]Sandbox{}
	for _, sb := range h.order {
		for _, a := range h.addrs[sb] {
			if holders := h.Holders(a); len(holders) > 1 {
				dups[a] = holders
			}
		}
	}
	return dups
}

// DescribeDuplicates lists duplicates as "addr: pod/name (netns), ...".
func DescribeDuplicates(dups map[netip.Addr][]Sandbox) string {
	var lines []string
	for _, a := range slices.SortedFunc(maps.Keys(dups), netip.Addr.Compare) {
		var who []string
		for _, sb := range dups[a] {
			who = append(who, fmt.Sprintf("%s (%s)", sb.Pod, sb.Netns.Name))
		}
		lines = append(lines, a.String()+": "+strings.Join(who, ", "))
	}
	return strings.Join(lines, "; ")
}
