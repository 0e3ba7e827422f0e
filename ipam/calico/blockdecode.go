package calico

import (
	"encoding/json"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/jsonscan"
)

// DecodeBlock decodes a stored block into b, as encoding/json does into
// a zero Block. The form Calico writes in etcd (plain strings, the
// ordinal lists, the attributes in their common form, unsigned sequence
// numbers) is read without reflection: an audit decodes every block of
// the cluster. Anything else (a key Block does not have, such as the
// Kubernetes datastore's strictAffinity) goes to encoding/json;
// FuzzDecodeBlock holds the two to one answer.
func DecodeBlock(data []byte, b *Block) error {
	if decodeCommonBlock(data, b) {
		return nil
	}
	return json.Unmarshal(data, b)
}

// decodeCommonBlock decodes data into b when it is in the common form,
// and says whether it was; b is not written when not.
func decodeCommonBlock(data []byte, b *Block) bool {
	var c Block
	if !jsonscan.Fields(data, blockKeys[:], func(n, i int) (int, bool) { return c.readField(n, data, i) }) {
		return false
	}
	*b = c
	return true
}

// blockKeys are the keys of the common form, as Block's tags spell them.
var blockKeys = [...]string{"cidr", "affinity", "affinity_claim_time", "allocations", "unallocated", "attributes",
	"sequenceNumber", "sequenceNumberForAllocation", "deleted"}

// readField reads the value at i of the key numbered n.
func (b *Block) readField(n int, data []byte, i int) (int, bool) {
	switch n {
	case 0:
		from, to, ok := jsonscan.PlainString(data, i)
		return to + 1, ok && b.CIDR.UnmarshalText(data[from:to]) == nil
	case 1:
		return readNullableString(data, i, &b.Affinity)
	case 2:
		return readClaimTime(data, i, &b.AffinityClaimTime)
	case 3:
		return readOrdinals(data, i, &b.Allocations)
	case 4:
		return readInts(data, i, &b.Unallocated)
	case 5:
		return readAttributes(data, i, &b.Attributes)
	case 6:
		v, end, ok := jsonscan.Uint(data, i)
		b.SequenceNumber = v
		return end, ok
	case 7:
		return readSequences(data, i, &b.SequenceNumberForAllocation)
	default:
		return jsonscan.Bool(data, i, &b.Deleted)
	}
}

func readClaimTime(data []byte, i int, dst **time.Time) (int, bool) {
	if next, null := jsonscan.Null(data, i); null {
		*dst = nil
		return next, true
	}
	_, to, ok := jsonscan.PlainString(data, i)
	if !ok {
		return i, false
	}
	var t time.Time
	if t.UnmarshalJSON(data[i:to+1]) != nil {
		return i, false
	}
	*dst = &t
	return to + 1, true
}

// readOrdinals reads the allocations list: each an attribute's index or
// null. The indexes share one array.
func readOrdinals(data []byte, i int, dst *[]*int) (int, bool) {
	if next, null := jsonscan.Null(data, i); null {
		*dst = nil
		return next, true
	}
	var ints []int
	var isNull []bool
	end, ok := jsonscan.Array(data, i, func(v int) (int, bool) {
		if next, null := jsonscan.Null(data, v); null {
			ints, isNull = append(ints, 0), append(isNull, true)
			return next, true
		}
		n, next, ok := smallInt(data, v)
		ints, isNull = append(ints, n), append(isNull, false)
		return next, ok
	})
	if !ok {
		return i, false
	}
	out := make([]*int, len(ints))
	for k := range ints {
		if !isNull[k] {
			out[k] = &ints[k]
		}
	}
	*dst = out
	return end, true
}

func readInts(data []byte, i int, dst *[]int) (int, bool) {
	if next, null := jsonscan.Null(data, i); null {
		*dst = nil
		return next, true
	}
	out := []int{}
	end, ok := jsonscan.Array(data, i, func(v int) (int, bool) {
		n, next, ok := smallInt(data, v)
		out = append(out, n)
		return next, ok
	})
	if ok {
		*dst = out
	}
	return end, ok
}

// smallInt reads an unsigned integer that an int holds on every platform.
func smallInt(data []byte, i int) (int, int, bool) {
	v, end, ok := jsonscan.Uint(data, i)
	return int(v), end, ok && v <= 1<<31-1
}

func readAttributes(data []byte, i int, dst *[]Attribute) (int, bool) {
	if next, null := jsonscan.Null(data, i); null {
		*dst = nil
		return next, true
	}
	out := []Attribute{}
	end, ok := jsonscan.Array(data, i, func(v int) (int, bool) {
		var c commonAttribute
		next, ok := c.read(data, v)
		var a Attribute
		c.apply(&a.HandleID, &a.Secondary)
		out = append(out, a)
		return next, ok
	})
	if ok {
		*dst = out
	}
	return end, ok
}

func readSequences(data []byte, i int, dst *map[string]uint64) (int, bool) {
	if next, null := jsonscan.Null(data, i); null {
		*dst = nil
		return next, true
	}
	m := map[string]uint64{}
	end, ok := jsonscan.Object(data, i, func(key []byte, v int) (int, bool) {
		n, next, ok := jsonscan.Uint(data, v)
		m[string(key)] = n
		return next, ok
	})
	if ok {
		*dst = m
	}
	return end, ok
}
