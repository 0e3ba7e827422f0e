package calicosim

import (
	"fmt"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// Filled and SeedBlocks leave in etcd what the Allocator's assignments
// leave one at a time (make scale-detect plants a large cluster so):
// the same blocks, handle documents and affinities, key for key and byte
// for byte, here 11 pods across two /29 blocks of one node.
func TestFilledIsWhatAssignmentsLeave(t *testing.T) {
	pool := poolSpec{"p", "10.0.0.0/28", 29}
	s := newSim(t, pool)
	at := time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	var holders []Holder
	for i := range 11 {
		holders = append(holders, Holder{Handle: fmt.Sprintf("%s.c%d", network, i),
			Secondary: map[string]string{"node": node1, "namespace": "default", "pod": fmt.Sprintf("p%d", i), "timestamp": at.String()}})
	}
	pools, err := ReadIPPools(s.ctx, s.cli)
	if err != nil {
		t.Fatal(err)
	}
	a := &Allocator{Client: s.cli, Node: node1, Now: func() time.Time { return at }}
	for _, h := range holders {
		if _, err := a.Assign(s.ctx, pools, h.Handle, h.Secondary); err != nil {
			t.Fatal(err)
		}
	}
	assigned := s.ipamData()
	s.reset(t, pool)
	blocks, err := Filled(node1, netip.MustParsePrefix("10.0.0.0/29"), holders, at)
	if err != nil {
		t.Fatal(err)
	}
	if err := SeedBlocks(s.ctx, s.cli, blocks); err != nil {
		t.Fatal(err)
	}
	if seeded := s.ipamData(); len(assigned) != 2+2+11 || !maps.Equal(seeded, assigned) {
		t.Errorf("seeded:\n%v\nassigned one at a time (2 blocks, 2 affinities, 11 handles):\n%v", seeded, assigned)
	}
}

// ipamData is every key and value under Calico's IPAM prefix.
func (s *sim) ipamData() map[string]string {
	s.t.Helper()
	out, err := s.etcd.Dump(calico.IPAMPrefix)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}
