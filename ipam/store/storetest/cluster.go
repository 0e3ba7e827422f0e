package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// RunCluster checks a store that holds every node's records, opened for
// node1: each node lists its own records, ListEveryNode every node's with
// their quarantines, and a record of one node fences another's address.
func RunCluster(t *testing.T, open func(t *testing.T) store.Cluster) {
	runChecks(t, open, []check[store.Cluster]{
		{"a node lists its own records, every node's are listed together", everyNode},
		{"a quarantine of another node's attachment is listed with its holder, which Holder names", crossNodeQuarantine},
		{"sweeps: records counted by node, notes of gone nodes, and a lead", sweeps},
	})
}

// createOn writes a pending record of att on node.
func createOn(t *testing.T, s store.Store, node string, att record.Attachment) *record.Record {
	t.Helper()
	p := pending(att)
	p.Node = node
	p, err := s.Swap(ctx, att, nil, p)
	if err != nil {
		t.Fatalf("create %s on %s: %v", att, node, err)
	}
	return p
}

func nodesOf(recs []*record.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Node+"/"+r.ContainerID)
	}
	slices.Sort(out)
	return out
}

func everyNode(t *testing.T, s store.Cluster) {
	node2 := s.ForNode("node2")
	createOn(t, s, "node1", attachment("a"))
	createOn(t, node2, "node2", attachment("b"))
	createOn(t, node2, "node2", record.Attachment{Network: "net2", ContainerID: "c", IfName: "eth0"})
	for _, tc := range []struct {
		name string
		list func() ([]*record.Record, error)
		want []string
	}{
		{"node1", func() ([]*record.Record, error) { return s.List(ctx, "net1") }, []string{"node1/a"}},
		{"node2", func() ([]*record.Record, error) { return node2.List(ctx, "net1") }, []string{"node2/b"}},
		{"every node", func() ([]*record.Record, error) { return s.ListEveryNode(ctx, "net1") }, []string{"node1/a", "node2/b"}},
	} {
		recs, err := tc.list()
		if got := nodesOf(recs); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("records of net1 listed for %s = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := s.ListEveryNode(ctx, ""); err == nil {
		t.Error("listing every node's records of no network succeeded")
	}
}

func crossNodeQuarantine(t *testing.T, s store.Cluster) {
	holder := mustCommit(t, s, "holder", "10.0.0.1/26")
	node2 := s.ForNode("node2")
	p := createOn(t, node2, "node2", attachment("late"))
	c := *p
	c.State, c.IPs = record.Committed, []string{"10.0.0.1/26"}
	var held *store.HeldError
	if _, err := node2.Commit(ctx, p, &c); !errors.As(err, &held) || held.Holder.Attachment != holder.Attachment {
		t.Fatalf("node2's commit of node1's address = %v; want held by %s", err, holder.Attachment)
	}
	q := record.Quarantine{Attachment: p.Attachment, IPs: c.IPs}
	if err := node2.Quarantine(ctx, p, held.Holder, q); err != nil {
		t.Fatalf("quarantine: %v", err)
	}
	recs, err := s.ListEveryNode(ctx, "net1")
	if err != nil || len(recs) != 1 || len(recs[0].Quarantined) != 1 || recs[0].Quarantined[0].Node != "node2" || recs[0].Quarantined[0].Attachment != p.Attachment {
		t.Fatalf("every node's records = %+v, %v; want the holder alone, with node2's quarantine", recs, err)
	}
	if _, err := node2.Swap(ctx, p.Attachment, nil, pending(p.Attachment)); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("node2 creating a record of its quarantined attachment: %v; want ErrQuarantined", err)
	}
	if got, err := node2.(store.Cluster).Holder(ctx, "net1", "10.0.0.1"); err != nil || got == nil || got.Node != "node1" || got.Attachment != holder.Attachment {
		t.Fatalf("node2's Holder(10.0.0.1) = %+v, %v; want node1's holder", got, err)
	}
	if got, err := s.Holder(ctx, "net1", "10.0.0.9"); err != nil || got != nil {
		t.Fatalf("Holder of an address no record holds = %+v, %v; want none", got, err)
	}
}

func sweeps(t *testing.T, s store.Cluster) {
	createOn(t, s, "node1", attachment("a"))
	createOn(t, s.ForNode("node2"), "node2", attachment("b"))
	createOn(t, s.ForNode("node2"), "node2", attachment("c"))
	createOn(t, s.ForNode("node3"), "node3", record.Attachment{Network: "net2", ContainerID: "d", IfName: "eth0"})
	counts, err := s.RecordCounts(ctx, "net1")
	if err != nil || len(counts) != 2 || counts["node1"] != 1 || counts["node2"] != 2 {
		t.Errorf("RecordCounts(net1) = %v, %v; want node1 1, node2 2", counts, err)
	}
	if err := s.NoteGone(ctx, "net1", "node2", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.NoteGone(ctx, "net1", "node4", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.NoteGone(ctx, "net1", "node5", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetGone(ctx, "net1", "node5"); err != nil {
		t.Fatal(err)
	}
	seen, err := s.Sightings(ctx, "net1")
	switch {
	case err != nil || len(seen) != 2:
		t.Errorf("Sightings(net1) = %v, %v; want node2 and node4", seen, err)
	case seen["node2"].Passed || seen["node2"].Grace != time.Hour:
		t.Errorf("node2's sighting = %+v: its hour of grace has not passed", seen["node2"])
	case !seen["node4"].Passed:
		t.Errorf("node4's sighting = %+v: no grace, so passed", seen["node4"])
	}
	if other, err := s.Sightings(ctx, "net2"); err != nil || len(other) != 0 {
		t.Errorf("Sightings(net2) = %v, %v; want none", other, err)
	}
	if leader, err := s.Lead(ctx, "net1", time.Minute, false); err != nil || leader != "" {
		t.Errorf("Lead(net1) without campaigning, nobody leading = %q, %v; want nobody", leader, err)
	}
	for range 2 {
		if leader, err := s.Lead(ctx, "net1", time.Minute, true); err != nil || leader != "node1" {
			t.Errorf("Lead(net1) of the only candidate = %q, %v; want node1", leader, err)
		}
	}
}
