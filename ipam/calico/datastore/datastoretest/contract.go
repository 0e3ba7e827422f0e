// Package datastoretest is the contract every datastore.Datastore
// passes: run it from each implementation's tests against a real server
// (etcd, kube-apiserver).
package datastoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

// Backend is one implementation with empty data, and what the contract
// needs that the interface does not offer: writes as calico-ipam (or
// damage) leaves them, bypassing the interface's guards.
type Backend struct {
	Store datastore.Datastore
	// SetPageSize makes scans read n objects per page.
	SetPageSize func(n int64)
	// Affinity writes node's claim on cidr, marked deleted when deleted.
	Affinity func(t *testing.T, node string, cidr netip.Prefix, deleted bool)
	// Garble writes a block document for cidr that does not decode.
	Garble func(t *testing.T, cidr netip.Prefix)
	// MarkDeleted sets deleted on the handle document, as the first half
	// of a delete does.
	MarkDeleted func(t *testing.T, handle string)
	// Node makes node name known, as Calico (etcd) or the kubelet (the
	// Kubernetes datastore) registers it.
	Node func(t *testing.T, name string)
}

// Run runs the contract. fresh returns a backend over empty data.
func Run(t *testing.T, fresh func(t *testing.T) *Backend) {
	tests := []struct {
		name string
		run  func(t *testing.T, b *Backend)
	}{
		{"scan finds what was written", scanFinds},
		{"versions change on write", versionsChange},
		{"a stale version loses", staleLoses},
		{"objects marked deleted are absent", deletedAbsent},
		{"an undecodable document is reported, not fatal", undecodable},
		{"a large list pages completely", pages},
		{"a handle write deletes when it counts nothing", handleDelete},
		{"a rewrite keeps an attribute's unknown keys", attributeKeysKept},
		{"a node is known once registered, absent before", nodeExists},
		{"one listing names every registered node", nodesListed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, fresh(t)) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// seed writes a node's block with one address under each handle, and the
// handle documents, through the interface, and returns the block.
func seed(t *testing.T, ds datastore.Datastore, cidr string, handles ...string) *calico.Block {
	t.Helper()
	b, err := calico.NewBlock(netip.MustParsePrefix(cidr), 1000)
	if err != nil {
		t.Fatal(err)
	}
	b.ClaimFor("node1", time.Now())
	for _, h := range handles {
		if _, err := b.Allocate(1, h, map[string]string{"node": "node1"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ds.Write(ctx(t), datastore.Change{Blocks: []*datastore.Block{{Block: b}}}); err != nil {
		t.Fatalf("creating block %s: %v", cidr, err)
	}
	for _, h := range handles {
		counts := calico.NewHandle()
		counts.Add(b.CIDR, 1)
		if err := ds.Write(ctx(t), datastore.Change{Handle: &datastore.Handle{ID: h, Handle: counts}}); err != nil {
			t.Fatalf("creating handle %s: %v", h, err)
		}
	}
	return b
}

// scanned is what one Scan handed its visitor.
type scanned struct {
	point       datastore.Point
	blocks      map[netip.Prefix]*calico.Block
	handles     map[string]string
	versions    map[string]datastore.Version
	affinities  map[string]bool
	undecodable map[string]string
}

func scan(t *testing.T, ds datastore.Datastore) *scanned {
	t.Helper()
	s := &scanned{blocks: map[netip.Prefix]*calico.Block{}, handles: map[string]string{},
		versions: map[string]datastore.Version{}, affinities: map[string]bool{}, undecodable: map[string]string{}}
	var told []datastore.Point
	visited := false
	p, err := ds.Scan(ctx(t), datastore.Visitor{
		// Read, when the store calls it, comes once, before anything is
		// visited, with the point Scan returns.
		Read: func(p datastore.Point) {
			if visited {
				t.Error("Read came after the scan visited a document")
			}
			told = append(told, p)
		},
		Block: func(b *calico.Block) { s.blocks[b.CIDR], visited = b, true },
		Handle: func(id string, counts json.RawMessage, v datastore.Version) {
			s.handles[id], s.versions[id] = string(counts), v
		},
		Affinity:    func(node string, cidr netip.Prefix) { s.affinities[node+" "+cidr.String()] = true },
		Undecodable: func(key string, err error) { s.undecodable[key] = err.Error() },
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	if len(told) > 1 || len(told) == 1 && told[0] != p {
		t.Errorf("Read told %v; the scan read at %v", told, p)
	}
	s.point = p
	return s
}

func scanFinds(t *testing.T, b *Backend) {
	ds := b.Store
	seed(t, ds, "10.244.0.0/26", "net1.c1", "default.web-0")
	seed(t, ds, "10.244.0.64/26", "net1.Upper")
	b.Affinity(t, "node1", netip.MustParsePrefix("10.244.0.0/26"), false)
	got := scan(t, ds)
	if got.point == (datastore.Point{}) {
		t.Error("scan names no revision or resourceVersion")
	}
	if len(got.blocks) != 2 || len(got.blocks[netip.MustParsePrefix("10.244.0.0/26")].Held()) != 2 {
		t.Errorf("blocks %v", got.blocks)
	}
	want := map[string]string{"net1.c1": `{"10.244.0.0/26":1}`, "default.web-0": `{"10.244.0.0/26":1}`, "net1.Upper": `{"10.244.0.64/26":1}`}
	for id, counts := range want {
		if got.handles[id] != counts || got.versions[id] == "" {
			t.Errorf("handle %s: counts %s version %q, want %s", id, got.handles[id], got.versions[id], counts)
		}
	}
	if len(got.handles) != len(want) || !got.affinities["node1 10.244.0.0/26"] || len(got.affinities) != 1 {
		t.Errorf("handles %v, affinities %v", got.handles, got.affinities)
	}
	h, err := ds.Handle(ctx(t), "net1.Upper")
	if err != nil || h == nil || h.ID != "net1.Upper" || h.Handle.Total() != 1 || h.Version != got.versions["net1.Upper"] {
		t.Errorf("handle net1.Upper read alone: %+v, %v", h, err)
	}
	// Without Handle and Affinity the scan reads the blocks alone: a
	// handle or affinity handed to the nil visitors would panic.
	blocks := map[netip.Prefix]int{}
	p, err := ds.Scan(ctx(t), datastore.Visitor{
		Block:       func(b *calico.Block) { blocks[b.CIDR] = len(b.Held()) },
		Undecodable: func(key string, err error) { t.Errorf("undecodable %s: %v", key, err) },
	})
	if err != nil || p == (datastore.Point{}) || len(blocks) != 2 || blocks[netip.MustParsePrefix("10.244.0.0/26")] != 2 {
		t.Errorf("blocks-only scan: %v at %+v, %v", blocks, p, err)
	}
	// Handle without Affinity is refused before anything is read.
	if _, err := ds.Scan(ctx(t), datastore.Visitor{Block: func(*calico.Block) {}, Undecodable: func(string, error) {},
		Handle: func(string, json.RawMessage, datastore.Version) {}}); err == nil {
		t.Error("a Visitor with Handle and no Affinity: no error")
	}
}

func versionsChange(t *testing.T, b *Backend) {
	ds := b.Store
	seed(t, ds, "10.244.0.0/26", "net1.c1")
	blk := readBlock(t, ds, "10.244.0.0/26")
	before := blk.Version
	if _, err := blk.Block.Allocate(1, "net1.c2", nil); err != nil {
		t.Fatal(err)
	}
	h, err := ds.Handle(ctx(t), "net1.c1")
	if err != nil || h == nil {
		t.Fatalf("handle: %+v, %v", h, err)
	}
	hBefore := h.Version
	h.Handle.Add(blk.Block.CIDR, 1)
	if err := ds.Write(ctx(t), datastore.Change{Blocks: []*datastore.Block{blk}, Handle: h}); err != nil {
		t.Fatal(err)
	}
	after := readBlock(t, ds, "10.244.0.0/26")
	if after.Version == before || len(after.Block.OrdinalsOf("net1.c2")) != 1 {
		t.Errorf("block after write: version %q (was %q), %d addresses of net1.c2", after.Version, before, len(after.Block.OrdinalsOf("net1.c2")))
	}
	h2, err := ds.Handle(ctx(t), "net1.c1")
	if err != nil || h2 == nil || h2.Version == hBefore || h2.Handle.Total() != 2 {
		t.Errorf("handle after write: %+v (was version %q), %v", h2, hBefore, err)
	}
}

func readBlock(t *testing.T, ds datastore.Datastore, cidr string) *datastore.Block {
	t.Helper()
	blk, err := ds.Block(ctx(t), netip.MustParsePrefix(cidr))
	if err != nil || blk == nil {
		t.Fatalf("block %s: %+v, %v", cidr, blk, err)
	}
	return blk
}

func staleLoses(t *testing.T, b *Backend) {
	ds := b.Store
	seed(t, ds, "10.244.0.0/26", "net1.c1")
	tests := []struct {
		name  string
		write func(stale *datastore.Block, staleHandle *datastore.Handle) datastore.Change
	}{
		{"block", func(s *datastore.Block, _ *datastore.Handle) datastore.Change {
			s.Block.ReleaseHandle("net1.c1")
			return datastore.Change{Blocks: []*datastore.Block{s}}
		}},
		{"handle update", func(_ *datastore.Block, h *datastore.Handle) datastore.Change {
			h.Handle.Add(netip.MustParsePrefix("10.244.0.0/26"), 5)
			return datastore.Change{Handle: h}
		}},
		{"handle delete", func(_ *datastore.Block, h *datastore.Handle) datastore.Change {
			h.Handle = nil
			return datastore.Change{Handle: h}
		}},
		{"create over an existing handle", func(_ *datastore.Block, h *datastore.Handle) datastore.Change {
			return datastore.Change{Handle: &datastore.Handle{ID: h.ID, Handle: h.Handle}}
		}},
		{"a compared block", func(s *datastore.Block, _ *datastore.Handle) datastore.Change {
			return datastore.Change{Compared: []*datastore.Block{s}, Handle: &datastore.Handle{ID: "net1.new", Handle: calico.NewHandle()}}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stale := readBlock(t, ds, "10.244.0.0/26")
			staleHandle, err := ds.Handle(ctx(t), "net1.c1")
			if err != nil || staleHandle == nil {
				t.Fatalf("handle: %v", err)
			}
			bumpBoth(t, ds, i) // another writer wins first
			won := scan(t, ds)
			err = ds.Write(ctx(t), tt.write(stale, staleHandle))
			if !errors.Is(err, datastore.ErrConflict) {
				t.Fatalf("stale write: %v, want ErrConflict", err)
			}
			after := scan(t, ds)
			if fmt.Sprint(after.handles) != fmt.Sprint(won.handles) || len(after.blocks[stale.Block.CIDR].OrdinalsOf("net1.c1")) != 1 {
				t.Errorf("the stale write changed data: handles %v, want %v", after.handles, won.handles)
			}
		})
	}
}

// bumpBoth rewrites block 10.244.0.0/26 and handle net1.c1 unchanged in
// meaning, so that both get new versions. Each round n must change the
// documents: the API server keeps the version of a write that changes
// nothing.
func bumpBoth(t *testing.T, ds datastore.Datastore, n int) {
	t.Helper()
	blk := readBlock(t, ds, "10.244.0.0/26")
	blk.Block.SequenceNumber++
	h, err := ds.Handle(ctx(t), "net1.c1")
	if err != nil || h == nil {
		t.Fatalf("handle: %v", err)
	}
	h.Handle.Add(blk.Block.CIDR, 0)
	if err := ds.Write(ctx(t), datastore.Change{Blocks: []*datastore.Block{blk}}); err != nil {
		t.Fatal(err)
	}
	h.Handle.Block[fmt.Sprintf("10.244.%d.0/26", 100+n)] = 0 // a different document, same counts
	if err := ds.Write(ctx(t), datastore.Change{Handle: h}); err != nil {
		t.Fatal(err)
	}
}

func deletedAbsent(t *testing.T, b *Backend) {
	ds := b.Store
	seed(t, ds, "10.244.0.0/26", "net1.c1", "net1.c2")
	b.MarkDeleted(t, "net1.c1")
	b.Affinity(t, "node1", netip.MustParsePrefix("10.244.0.0/26"), true)
	got := scan(t, ds)
	if _, ok := got.handles["net1.c1"]; ok || len(got.handles) != 1 {
		t.Errorf("handles %v: the one marked deleted is listed", got.handles)
	}
	if len(got.affinities) != 0 {
		t.Errorf("affinities %v: the one marked deleted is listed", got.affinities)
	}
	if h, err := ds.Handle(ctx(t), "net1.c1"); err != nil || h != nil {
		t.Errorf("handle marked deleted read alone: %+v, %v", h, err)
	}
	// The reader finished the delete, as Calico's readers do: the handle
	// can be created anew (a mark left for ever would make every Create
	// of that name a lost race).
	counts := calico.NewHandle()
	counts.Add(netip.MustParsePrefix("10.244.0.0/26"), 1)
	if err := ds.Write(ctx(t), datastore.Change{Handle: &datastore.Handle{ID: "net1.c1", Handle: counts}}); err != nil {
		t.Errorf("creating a handle whose marked predecessor was read: %v", err)
	}
}

func undecodable(t *testing.T, b *Backend) {
	ds := b.Store
	seed(t, ds, "10.244.0.0/26", "net1.c1")
	b.Garble(t, netip.MustParsePrefix("10.244.0.64/26"))
	got := scan(t, ds)
	if len(got.undecodable) != 1 || len(got.blocks) != 1 || len(got.handles) != 1 {
		t.Fatalf("undecodable %v, blocks %d, handles %v", got.undecodable, len(got.blocks), got.handles)
	}
	if _, err := ds.Block(ctx(t), netip.MustParsePrefix("10.244.0.64/26")); err == nil {
		t.Error("reading the undecodable block alone is no error")
	}
}

func pages(t *testing.T, b *Backend) {
	ds := b.Store
	var handles []string
	for i := range 11 {
		handles = append(handles, fmt.Sprintf("net1.c%d", i))
	}
	seed(t, ds, "10.244.0.0/26", handles...)
	seed(t, ds, "10.244.0.64/26", "net1.x")
	b.SetPageSize(3)
	got := scan(t, ds)
	if len(got.handles) != 12 || len(got.blocks) != 2 {
		t.Fatalf("paged scan: %d handles, %d blocks; want 12, 2", len(got.handles), len(got.blocks))
	}
}

func handleDelete(t *testing.T, b *Backend) {
	ds := b.Store
	seed(t, ds, "10.244.0.0/26", "net1.c1")
	h, err := ds.Handle(ctx(t), "net1.c1")
	if err != nil || h == nil {
		t.Fatalf("handle: %v", err)
	}
	h.Handle = calico.NewHandle()
	if err := ds.Write(ctx(t), datastore.Change{Handle: h}); err != nil {
		t.Fatal(err)
	}
	if h, err := ds.Handle(ctx(t), "net1.c1"); err != nil || h != nil {
		t.Errorf("deleted handle read: %+v, %v", h, err)
	}
	if got := scan(t, ds); len(got.handles) != 0 {
		t.Errorf("deleted handle scanned: %v", got.handles)
	}
}

// attributeKeysKept gives net1.c2's attribute Calico's cooldown keys,
// then releases net1.c1, whose attribute comes first: the keys stay on
// net1.c2's attribute, renumbered from 1 to 0.
func attributeKeysKept(t *testing.T, b *Backend) {
	ds := b.Store
	seed(t, ds, "10.244.0.0/26", "net1.c1", "net1.c2")
	const keys = `"alternateOwnerAttrs":{"pod":"old"},"releasedAt":"2026-01-02T03:04:05Z"`
	blk := readBlock(t, ds, "10.244.0.0/26")
	if err := json.Unmarshal([]byte(`{"handle_id":"net1.c2","secondary":{"node":"node1"},`+keys+`}`), &blk.Block.Attributes[1]); err != nil {
		t.Fatal(err)
	}
	if err := ds.Write(ctx(t), datastore.Change{Blocks: []*datastore.Block{blk}}); err != nil {
		t.Fatal(err)
	}
	blk = readBlock(t, ds, "10.244.0.0/26")
	blk.Block.ReleaseHandle("net1.c1")
	if err := ds.Write(ctx(t), datastore.Change{Blocks: []*datastore.Block{blk}}); err != nil {
		t.Fatal(err)
	}
	blk = readBlock(t, ds, "10.244.0.0/26")
	attr, ok := blk.Block.Attribute(1)
	got, err := json.Marshal(attr)
	if want := `{"handle_id":"net1.c2","secondary":{"node":"node1"},` + keys + `}`; !ok || err != nil || string(got) != want || len(blk.Block.Attributes) != 1 {
		t.Errorf("attribute of net1.c2 after the rewrite: %s (of %d), %v; want %s", got, len(blk.Block.Attributes), err, want)
	}
}

func nodeExists(t *testing.T, b *Backend) {
	if ok, err := b.Store.NodeExists(ctx(t), "node-gone"); err != nil || ok {
		t.Fatalf("NodeExists of a node never registered: %v, %v; want false", ok, err)
	}
	b.Node(t, "node-here")
	if ok, err := b.Store.NodeExists(ctx(t), "node-here"); err != nil || !ok {
		t.Fatalf("NodeExists of a registered node: %v, %v; want true", ok, err)
	}
}

func nodesListed(t *testing.T, b *Backend) {
	before, err := b.Store.Nodes(ctx(t))
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	for _, n := range []string{"node-listed-1", "node-listed-2"} {
		if slices.Contains(before, n) {
			t.Fatalf("Nodes before %s registered: %v", n, before)
		}
		b.Node(t, n)
	}
	after, err := b.Store.Nodes(ctx(t))
	if err != nil || len(after) != len(before)+2 || !slices.Contains(after, "node-listed-1") || !slices.Contains(after, "node-listed-2") || slices.Contains(after, "node-gone") {
		t.Fatalf("Nodes after two registered: %v, %v; want %v and both", after, err, before)
	}
}
