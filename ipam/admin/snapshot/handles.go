package snapshot

import (
	"encoding/json"
	"iter"
	"net/netip"
	"strconv"

	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

// handles is every handle the snapshot names (by an allocation, a
// handle document or a record), each string stored once: a million
// handles kept as separate strings, raw documents and versions made the
// audit of a large cluster miss its memory target.
type handles struct {
	index map[string]int32
	// docs are in chunks of chunkSize, by index: one slice grown by
	// append to a million copied itself again and again.
	docs  [][]handleDoc
	count int
	// odd holds the documents not in the common form, by index.
	odd map[int32]oddDoc
	// scratch is where a document is written back to compare, without a
	// new buffer for each of a million.
	scratch []byte
}

// handleDoc is one handle and, when a document exists, what it counts.
// The common document, {"<block>":n} of a block the scan read, at an
// etcd revision, is kept as that block and n.
type handleDoc struct {
	id      string
	block   *BlockSummary
	count   int32
	has     bool // a handle document exists
	version int64
}

// oddDoc is a handle document as stored, when it is not in the common
// form.
type oddDoc struct {
	counts  json.RawMessage
	version datastore.Version
}

// HandleDoc is one handle document: its per-block counts.
type HandleDoc struct {
	block *BlockSummary
	count int
	raw   json.RawMessage
}

// Counts is the document's per-block counts as stored.
func (d HandleDoc) Counts() json.RawMessage {
	if d.raw != nil {
		return d.raw
	}
	return commonCounts(d.block.CIDR, d.count)
}

// Single is the block and count of a document that counts one block,
// when it is in Calico's common form.
func (d HandleDoc) Single() (netip.Prefix, int, bool) {
	if d.block == nil {
		return netip.Prefix{}, 0, false
	}
	return d.block.CIDR, d.count, true
}

func commonCounts(block netip.Prefix, n int) json.RawMessage {
	return appendCommon(nil, block, n)
}

// appendCommon appends {"<block>":n} to out.
func appendCommon(out []byte, block netip.Prefix, n int) []byte {
	out = append(out, `{"`...)
	out = block.AppendTo(out)
	out = append(out, `":`...)
	out = strconv.AppendInt(out, int64(n), 10)
	return append(out, '}')
}

// intern returns the stored copy of id, adding it when new.
func (h *handles) intern(id string) (string, int32) {
	if i, ok := h.index[id]; ok {
		return h.at(i).id, i
	}
	i := int32(h.count)
	h.index[id] = i
	if h.count%chunkSize == 0 {
		h.docs = append(h.docs, make([]handleDoc, 0, chunkSize))
	}
	last := &h.docs[len(h.docs)-1]
	*last = append(*last, handleDoc{id: id})
	h.count++
	return id, i
}

// at is the handle numbered i.
func (h *handles) at(i int32) *handleDoc { return &h.docs[i/chunkSize][i%chunkSize] }

// add keeps a handle document: in the common form when it is one, else
// as stored.
func (h *handles) add(id string, counts json.RawMessage, v datastore.Version, blocks map[netip.Prefix]*BlockSummary) {
	_, i := h.intern(id)
	d := h.at(i)
	d.has = true
	if b, n, ok := h.parseCommon(counts, blocks); ok {
		if rev, err := strconv.ParseInt(string(v), 10, 64); err == nil && rev > 0 && string(strconv.AppendInt(h.scratch[:0], rev, 10)) == string(v) {
			d.block, d.count, d.version = b, int32(n), rev
			return
		}
	}
	if h.odd == nil {
		h.odd = map[int32]oddDoc{}
	}
	h.odd[i] = oddDoc{counts: counts, version: v}
}

func etcdVersion(rev int64) datastore.Version {
	return datastore.Version(strconv.FormatInt(rev, 10))
}

// parseCommon reads {"<block>":n} of a block the scan read, only when
// writing it back gives the same bytes.
func (h *handles) parseCommon(counts json.RawMessage, blocks map[netip.Prefix]*BlockSummary) (*BlockSummary, int, bool) {
	s := string(counts)
	if len(s) < 7 || s[:2] != `{"` || s[len(s)-1] != '}' {
		return nil, 0, false
	}
	end := 2
	for end < len(s) && s[end] != '"' {
		end++
	}
	if end+2 >= len(s) || s[end+1] != ':' {
		return nil, 0, false
	}
	cidr, err := netip.ParsePrefix(s[2:end])
	if err != nil {
		return nil, 0, false
	}
	n, err := strconv.ParseInt(s[end+2:len(s)-1], 10, 32)
	b := blocks[cidr]
	if err != nil || n < 0 || b == nil {
		return nil, 0, false
	}
	if h.scratch = appendCommon(h.scratch[:0], cidr, int(n)); string(h.scratch) != s {
		return nil, 0, false
	}
	return b, int(n), true
}

func (h *handles) doc(i int32) (HandleDoc, bool) {
	d := h.at(i)
	if !d.has {
		return HandleDoc{}, false
	}
	if o, ok := h.odd[i]; ok {
		return HandleDoc{raw: o.counts}, true
	}
	return HandleDoc{block: d.block, count: int(d.count)}, true
}

// Handle is the handle document of id, if the scan read one.
func (s *Snapshot) Handle(id string) (HandleDoc, bool) {
	i, ok := s.handles.index[id]
	if !ok {
		return HandleDoc{}, false
	}
	return s.handles.doc(i)
}

// Handles are the handle documents the scan read.
func (s *Snapshot) Handles() iter.Seq2[string, HandleDoc] {
	return func(yield func(string, HandleDoc) bool) {
		for i := range int32(s.handles.count) {
			if d, ok := s.handles.doc(i); ok && !yield(s.handles.at(i).id, d) {
				return
			}
		}
	}
}

// HandleCount is how many handle documents the scan read.
func (s *Snapshot) HandleCount() int { return s.handleDocs }

// HandleVersion is the version of id's handle document as scanned ("" when
// none): repair acts only on a handle still at it.
func (s *Snapshot) HandleVersion(id string) datastore.Version {
	i, ok := s.handles.index[id]
	if !ok || !s.handles.at(i).has {
		return ""
	}
	if o, ok := s.handles.odd[i]; ok {
		return o.version
	}
	return etcdVersion(s.handles.at(i).version)
}

// HandleSlots is how many handles the snapshot names: its allocations',
// documents' and records' handles are numbered 0 to HandleSlots()-1, so an index
// by handle can be a slice.
func (s *Snapshot) HandleSlots() int { return s.handles.count }

// HandleSlot is id's number, if the snapshot names it.
func (s *Snapshot) HandleSlot(id string) (int, bool) {
	i, ok := s.handles.index[id]
	return int(i), ok
}

// HandleID is the handle numbered slot.
func (s *Snapshot) HandleID(slot int) string { return s.handles.at(int32(slot)).id }
