package datastore

import (
	"encoding/json"

	"github.com/safe-ipam/safe-ipam/ipam/jsonscan"
)

// handleFields are what a scan reads of a handle document in etcd.
type handleFields struct {
	Block   json.RawMessage `json:"block"`
	Deleted bool            `json:"deleted"`
}

// decode reads data as encoding/json does. The form Calico writes (block
// an object of plain-string keys and unsigned integer counts, deleted true
// or false, nothing else) is read without reflection: an audit reads a
// million handles. FuzzHandleFields holds the two to one answer. Unlike
// encoding/json, Block is then data's own bytes, not a copy: a scan's
// page is never reused, and Block is only read.
func (h *handleFields) decode(data []byte) error {
	var common handleFields
	var seenBlock, seenDeleted bool
	if jsonscan.Document(data, func(key []byte, i int) (int, bool) {
		switch {
		case string(key) == "block" && !seenBlock:
			seenBlock = true
			end, ok := countsObject(data, i)
			common.Block = data[i:end]
			return end, ok
		case string(key) == "deleted" && !seenDeleted:
			seenDeleted = true
			return jsonscan.Bool(data, i, &common.Deleted)
		}
		return i, false
	}) {
		if seenBlock {
			h.Block = common.Block
		}
		if seenDeleted {
			h.Deleted = common.Deleted
		}
		return nil
	}
	return json.Unmarshal(data, h)
}

// countsObject is where the object of plain keys and unsigned counts at
// i ends.
func countsObject(data []byte, i int) (int, bool) {
	return jsonscan.Object(data, i, func(_ []byte, v int) (int, bool) {
		_, end, ok := jsonscan.Uint(data, v)
		return end, ok
	})
}
