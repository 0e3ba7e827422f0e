package calicosim

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// TestFreedAddressIsReusedLast walks a /29 block: a released address
// comes back only after the rest of the block, then the pool runs out.
func TestFreedAddressIsReusedLast(t *testing.T) {
	s := newSim(t, poolSpec{"tiny", "10.0.0.0/29", 29})
	p := func(i int) pod { return pod{fmt.Sprintf("c%d", i), "default", fmt.Sprintf("p%d", i)} }
	var got []string
	got = append(got, s.mustAdd(ModernHandles, p(0)).String(), s.mustAdd(ModernHandles, p(1)).String())
	s.mustDel(ModernHandles, p(0))
	for i := 2; i < 9; i++ {
		got = append(got, s.mustAdd(ModernHandles, p(i)).String())
	}
	want := []string{"10.0.0.0/29", "10.0.0.1/29", "10.0.0.2/29", "10.0.0.3/29", "10.0.0.4/29",
		"10.0.0.5/29", "10.0.0.6/29", "10.0.0.7/29", "10.0.0.0/29"}
	if !slices.Equal(got, want) {
		t.Errorf("addresses in order %v, want %v", got, want)
	}
	_, err := s.add(ModernHandles, p(9), s.conf(nil))
	if !errors.Is(err, ErrNoFreeIPs) || !strings.Contains(err.Error(), "no more free IPs in pools [10.0.0.0/29]") {
		t.Errorf("ADD in a full pool: %v, want ErrNoFreeIPs naming the pool", err)
	}
	if s.state().HandleCount(network+".c9") != 0 {
		t.Error("failed ADD left a handle behind")
	}
}

// TestNoBorrowing: a node whose blocks are full fails even if another
// node's block has room, which tests use to make a delegate ADD fail.
func TestNoBorrowing(t *testing.T) {
	s := newSim(t, poolSpec{"p", "10.0.0.0/28", 29})
	if err := SeedNode(s.ctx, s.cli, "node2"); err != nil {
		t.Fatal(err)
	}
	node2 := s.conf(map[string]any{"nodename": "node2"})
	if _, err := s.add(ModernHandles, pod{container: "n2"}, node2); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		s.mustAdd(ModernHandles, pod{container: fmt.Sprint("n1-", i)})
	}
	_, err := s.add(ModernHandles, pod{container: "n1-x"}, s.conf(nil))
	if !errors.Is(err, ErrNoFreeIPs) {
		t.Fatalf("node1 with full block and no free block: %v, want ErrNoFreeIPs", err)
	}
	st := s.state()
	// node2 claimed first, so it holds the pool's first block.
	if b, _ := st.Block(netip.MustParsePrefix("10.0.0.0/29")); len(b.Allocated) != 1 || b.Block.Affinity == nil || *b.Block.Affinity != "host:node2" {
		t.Errorf("node2's block: %d allocations, affinity %v; want 1, host:node2", len(b.Allocated), b.Block.Affinity)
	}
	if len(st.Affinities) != 2 || st.Affinities[0].Node == st.Affinities[1].Node {
		t.Errorf("affinities %+v, want one block per node", st.Affinities)
	}
}

func TestIPv6AndDualStack(t *testing.T) {
	shared := newSim(t)
	pools := []poolSpec{{"default-ipv4-ippool", "10.244.0.0/16", 26}, {"default-ipv6-ippool", "fd00:10:244::/48", 122}}
	tests := []struct {
		name      string
		edits     map[string]any
		ips       []string
		routes    []string
		keys      []string
		wantError string
	}{
		{
			name:   "ipv6 only",
			edits:  map[string]any{"ipam.assign_ipv4": "false", "ipam.assign_ipv6": "true"},
			ips:    []string{"fd00:10:244::/122"},
			routes: []string{"fd00:10:244::/122"},
			keys: []string{"/calico/ipam/v2/assignment/ipv6/block/fd00:10:244::-122",
				"/calico/ipam/v2/host/node1/ipv6/block/fd00:10:244::-122"},
		},
		{
			name:   "dual stack",
			edits:  map[string]any{"ipam.assign_ipv6": "true"},
			ips:    []string{"10.244.0.0/26", "fd00:10:244::/122"},
			routes: []string{"10.244.0.0/26", "fd00:10:244::/122"},
			keys: []string{"/calico/ipam/v2/assignment/ipv4/block/10.244.0.0-26",
				"/calico/ipam/v2/assignment/ipv6/block/fd00:10:244::-122"},
		},
		{
			name:      "ipv6 pool by name and missing ipv4 pool undoes the ipv4 address",
			edits:     map[string]any{"ipam.assign_ipv6": "true", "ipam.ipv6_pools": []string{"nope"}},
			wantError: `configured pool "nope" does not exist`,
		},
		{
			name:      "nothing to assign",
			edits:     map[string]any{"ipam.assign_ipv4": "false"},
			wantError: "nothing to assign",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := shared.reset(t, pools...)
			res, err := s.add(ModernHandles, pod{container: "c1"}, s.conf(tt.edits))
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("err = %v, want %q", err, tt.wantError)
				}
				if n := len(s.state().Allocations()); n != 0 {
					t.Errorf("failed ADD left %d addresses allocated", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ips, routes []string
			for _, ip := range res.IPs {
				ips = append(ips, ip.Address.String())
				if ip.Gateway != nil {
					t.Errorf("gateway %v, want none", ip.Gateway)
				}
			}
			for _, r := range res.Routes {
				routes = append(routes, r.Dst.String())
				if r.GW != nil {
					t.Errorf("route gateway %v, want none", r.GW)
				}
			}
			if !slices.Equal(ips, tt.ips) || !slices.Equal(routes, tt.routes) {
				t.Errorf("ips %v routes %v, want %v %v", ips, routes, tt.ips, tt.routes)
			}
			for _, k := range tt.keys {
				if s.value(k) == "" {
					t.Errorf("missing key %s", k)
				}
			}
			want := make([]string, len(tt.ips))
			for i, ip := range tt.ips {
				want[i] = fmt.Sprintf("%q:1", netip.MustParsePrefix(ip).Masked())
			}
			wantHandle := `{"block":{` + strings.Join(want, ",") + `},"deleted":false}`
			if got := s.value(calico.HandleKey(network + ".c1")); got != wantHandle {
				t.Errorf("handle = %s, want %s", got, wantHandle)
			}
		})
	}
}

func TestPoolSelection(t *testing.T) {
	shared := newSim(t)
	tests := []struct {
		name      string
		pools     []string
		want      string
		wantError error
	}{
		{"default takes enabled workload pools by name", nil, "10.1.0.0/26", nil},
		{"by CIDR", []string{"10.2.0.0/16"}, "10.2.0.0/26", nil},
		{"by name", []string{"b"}, "10.2.0.0/26", nil},
		{"unknown pool", []string{"nope"}, "", ErrNoPool},
		{"wrong family", []string{"v6"}, "", ErrNoPool},
		{"disabled pool", []string{"a-off"}, "", ErrNoPool},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := shared.reset(t, poolSpec{"a", "10.1.0.0/16", 26}, poolSpec{"b", "10.2.0.0/16", 26}, poolSpec{"v6", "fd00::/48", 122})
			off := calico.NewIPPool("a-off", netip.MustParsePrefix("10.3.0.0/16"), 26)
			off.Spec.Disabled = true
			if err := seed(s.ctx, s.cli, calico.IPPoolKey("a-off"), off); err != nil {
				t.Fatal(err)
			}
			edits := map[string]any{}
			if tt.pools != nil {
				edits["ipam.ipv4_pools"] = tt.pools
			}
			res, err := s.add(ModernHandles, pod{container: "c"}, s.conf(edits))
			if tt.wantError != nil {
				if !errors.Is(err, tt.wantError) {
					t.Fatalf("err = %v, want %v", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := res.IPs[0].Address.String(); got != tt.want {
				t.Errorf("address %s, want %s", got, tt.want)
			}
		})
	}
}

func TestMissingNode(t *testing.T) {
	s := newSim(t, poolSpec{"p", "10.244.0.0/16", 26})
	tests := []struct{ nodename, want string }{
		{"node9", "resource does not exist: Node(node9)"},
		{"node1", ""},
	}
	for _, tt := range tests {
		_, err := s.add(ModernHandles, pod{container: "c-" + tt.nodename}, s.conf(map[string]any{"nodename": tt.nodename}))
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || err.Error() != tt.want) {
			t.Errorf("nodename %s: err = %v, want %q", tt.nodename, err, tt.want)
		}
	}
	if _, err := s.cli.Delete(s.ctx, calico.NodeKey(node1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.add(ModernHandles, pod{container: "c2"}, s.conf(nil)); err == nil || err.Error() != "resource does not exist: Node(node1)" {
		t.Errorf("after deleting node1: %v", err)
	}
}

// TestConcurrentAddsNeverShareAnAddress runs many in-process plugins at
// once without the host lock, with small blocks so that claims race too.
func TestConcurrentAddsNeverShareAnAddress(t *testing.T) {
	s := newSim(t, poolSpec{"p", "10.0.0.0/24", 29})
	const workers, perWorker = 12, 6
	type held struct {
		handle string
		ip     netip.Addr
	}
	var (
		mu   sync.Mutex
		kept []held
		wg   sync.WaitGroup
		errs = make(chan error, workers*perWorker)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				p := pod{fmt.Sprintf("w%d-%d", w, i), "ns", fmt.Sprintf("pod-%d-%d", w, i)}
				res, err := s.add(ModernHandles, p, s.conf(nil))
				if err != nil {
					errs <- fmt.Errorf("ADD %s: %w", p.container, err)
					continue
				}
				if i%3 == 2 { // release some while others allocate
					if err := s.plugin(ModernHandles).Del(p.args(s.conf(nil))); err != nil {
						errs <- fmt.Errorf("DEL %s: %w", p.container, err)
					}
					continue
				}
				ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
				mu.Lock()
				kept = append(kept, held{network + "." + p.container, ip.Unmap()})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[netip.Addr]string{}
	for _, h := range kept {
		if other, dup := seen[h.ip]; dup {
			t.Errorf("%s given to both %s and %s", h.ip, other, h.handle)
		}
		seen[h.ip] = h.handle
	}
	st := s.state()
	if got := len(st.Allocations()); got != len(kept) {
		t.Errorf("%d addresses allocated in etcd, want %d", got, len(kept))
	}
	for _, h := range kept {
		if al, ok := st.Lookup(h.ip); !ok || al.Handle != h.handle {
			t.Errorf("%s: etcd says %+v, want handle %s", h.ip, al, h.handle)
		}
	}
}
