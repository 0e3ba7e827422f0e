package calicosim

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// A step of a handle scenario: ADD or DEL of a pod in a handle mode.
type step struct {
	op   string // "add", "del" or "seed" (a Calico 2.x allocation)
	mode HandleMode
	pod  pod
}

func (s *sim) run(st step) {
	s.t.Helper()
	switch st.op {
	case "add":
		s.mustAdd(st.mode, st.pod)
	case "del":
		s.mustDel(st.mode, st.pod)
	case "seed":
		if _, err := SeedLegacyHandle(s.ctx, s.cli, node1, st.pod.namespace+"."+st.pod.name); err != nil {
			s.t.Fatal(err)
		}
	default:
		s.t.Fatalf("unknown op %q", st.op)
	}
}

// TestHandleGenerations reproduces BRIEF's handle facts: which DEL
// releases which address in each Calico generation.
func TestHandleGenerations(t *testing.T) {
	a := pod{"aaaaaaaaaaaa", "default", "web-0"}
	b := pod{"bbbbbbbbbbbb", "default", "web-0"}
	bare := func(p pod) pod { return pod{container: p.container} }
	const blk = "10.244.166.128/26"
	tests := []struct {
		name  string
		steps []step
		// held maps each address still allocated to its handle.
		held map[string]string
		// freeTail is the end of block blk's free list.
		freeTail []string
		counts   map[string]int
	}{
		{
			name:     "legacy: second container of the pod name shares the handle, late DEL of A frees B",
			steps:    []step{{"add", LegacyHandles, a}, {"add", LegacyHandles, b}, {"del", LegacyHandles, a}},
			held:     map[string]string{},
			freeTail: []string{"10.244.166.191", "10.244.166.128", "10.244.166.129"},
			counts:   map[string]int{"default.web-0": 0},
		},
		{
			name:     "legacy: before the late DEL the handle counts 2",
			steps:    []step{{"add", LegacyHandles, a}, {"add", LegacyHandles, b}},
			held:     map[string]string{"10.244.166.128": "default.web-0", "10.244.166.129": "default.web-0"},
			freeTail: []string{"10.244.166.191"},
			counts:   map[string]int{"default.web-0": 2},
		},
		{
			name:     "legacy: without pod args the handle is the container ID",
			steps:    []step{{"add", LegacyHandles, bare(a)}, {"add", LegacyHandles, bare(b)}, {"del", LegacyHandles, bare(a)}},
			held:     map[string]string{"10.244.166.129": "bbbbbbbbbbbb"},
			freeTail: []string{"10.244.166.191", "10.244.166.128"},
			counts:   map[string]int{"bbbbbbbbbbbb": 1, "aaaaaaaaaaaa": 0},
		},
		{
			name: "modern: DEL of another container frees the live pod-name handle",
			// B (seeded, .128) holds default.web-0; A gets .129. A's DEL
			// releases its own handle first, then the pod-name handle.
			steps:    []step{{"seed", "", b}, {"add", ModernHandles, a}, {"del", ModernHandles, a}},
			held:     map[string]string{},
			freeTail: []string{"10.244.166.191", "10.244.166.129", "10.244.166.128"},
			counts:   map[string]int{"default.web-0": 0, network + ".aaaaaaaaaaaa": 0},
		},
		{
			name:     "modern: DEL without pod args releases only the container's handles",
			steps:    []step{{"seed", "", b}, {"add", ModernHandles, a}, {"del", ModernHandles, bare(a)}},
			held:     map[string]string{"10.244.166.128": "default.web-0"},
			freeTail: []string{"10.244.166.191", "10.244.166.129"},
			counts:   map[string]int{"default.web-0": 1, network + ".aaaaaaaaaaaa": 0},
		},
		{
			name:     "modern: ADD twice under one handle allocates again",
			steps:    []step{{"add", ModernHandles, a}, {"add", ModernHandles, a}},
			held:     map[string]string{"10.244.166.128": network + ".aaaaaaaaaaaa", "10.244.166.129": network + ".aaaaaaaaaaaa"},
			freeTail: []string{"10.244.166.191"},
			counts:   map[string]int{network + ".aaaaaaaaaaaa": 2},
		},
		{
			name:     "modern: DEL is idempotent and DEL of nothing succeeds",
			steps:    []step{{"del", ModernHandles, a}, {"add", ModernHandles, a}, {"del", ModernHandles, a}, {"del", ModernHandles, a}},
			held:     map[string]string{},
			freeTail: []string{"10.244.166.191", "10.244.166.128"},
			counts:   map[string]int{network + ".aaaaaaaaaaaa": 0},
		},
	}
	shared := newSim(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := shared.reset(t, poolSpec{"p", "10.244.166.128/25", 26})
			for _, st := range tt.steps {
				s.run(st)
			}
			st := s.state()
			held := map[string]string{}
			for _, al := range st.Allocations() {
				held[al.IP.String()] = al.Handle
			}
			if !mapsEqual(held, tt.held) {
				t.Errorf("held = %v, want %v", held, tt.held)
			}
			bs, ok := st.Block(netip.MustParsePrefix(blk))
			if !ok {
				t.Fatalf("no block %s", blk)
			}
			if tail := bs.Free[len(bs.Free)-len(tt.freeTail):]; !slices.Equal(tail, addrs(tt.freeTail...)) {
				t.Errorf("free list ends %v, want %v", tail, tt.freeTail)
			}
			for h, want := range tt.counts {
				if got := st.HandleCount(h); got != want {
					t.Errorf("handle %s counts %d, want %d", h, got, want)
				}
				if want == 0 && s.value(calico.HandleKey(h)) != "" {
					t.Errorf("handle %s still exists", h)
				}
			}
		})
	}
}

// TestAttributesPerGeneration checks a Calico 2.x allocation has no secondary
// attributes and a Calico 3.x one has the pod's.
func TestAttributesPerGeneration(t *testing.T) {
	s := newSim(t, poolSpec{"p", "10.244.0.0/16", 26})
	legacy := s.mustAdd(LegacyHandles, pod{"c1", "ns", "old"})
	modern := s.mustAdd(ModernHandles, pod{"c2", "ns", "new"})
	bare := s.mustAdd(ModernHandles, pod{container: "c3"})
	st := s.state()
	tests := []struct {
		ip     netip.Addr
		handle string
		keys   []string
	}{
		{legacy.Addr(), "ns.old", nil},
		{modern.Addr(), network + ".c2", []string{"namespace", "node", "pod", "timestamp"}},
		{bare.Addr(), network + ".c3", []string{"node", "timestamp"}},
	}
	for _, tt := range tests {
		al, ok := st.Lookup(tt.ip)
		if !ok {
			t.Fatalf("%s not allocated", tt.ip)
		}
		keys := slices.Sorted(maps.Keys(al.Secondary))
		if al.Handle != tt.handle || !slices.Equal(keys, tt.keys) || (tt.keys == nil) != (al.Secondary == nil) {
			t.Errorf("%s: handle %s, secondary %v; want handle %s, keys %v", tt.ip, al.Handle, al.Secondary, tt.handle, tt.keys)
		}
		if tt.keys != nil && al.Secondary["node"] != node1 {
			t.Errorf("%s: node attribute %q", tt.ip, al.Secondary["node"])
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
