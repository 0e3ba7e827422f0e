package calico

import "github.com/safe-ipam/safe-ipam/ipam/jsonscan"

// decodeCommonAttribute decodes an attribute in the form Calico writes
// nearly every one: handle_id a plain string or null, secondary an object
// of plain strings or null, nothing else, each at most once. It gives
// what encoding/json gives into handle and secondary (a secondary object
// is merged into a map already there), and says whether data was in that
// form; nothing is written when it was not. An audit decodes a million
// attributes, and encoding/json (twice: the block, then each attribute)
// was a quarter of its time. FuzzDecodeCommonAttribute holds the two to
// the same answer.
func decodeCommonAttribute(data []byte, handle **string, secondary *map[string]string) bool {
	var c commonAttribute
	end, ok := c.read(data, jsonscan.Space(data, 0))
	if !ok || jsonscan.Space(data, end) != len(data) {
		return false
	}
	c.apply(handle, secondary)
	return true
}

// commonAttribute is an attribute in the common form, as read.
type commonAttribute struct {
	handle                                   *string
	secondary                                map[string]string
	seenHandle, seenSecondary, nullSecondary bool
}

// read reads the attribute object at i, and says where it ends.
func (c *commonAttribute) read(data []byte, i int) (int, bool) {
	return jsonscan.Object(data, i, func(key []byte, i int) (int, bool) {
		switch string(key) {
		case "handle_id":
			if c.seenHandle {
				return i, false
			}
			c.seenHandle = true
			return readNullableString(data, i, &c.handle)
		case "secondary":
			if c.seenSecondary {
				return i, false
			}
			c.seenSecondary = true
			if next, null := jsonscan.Null(data, i); null {
				c.nullSecondary = true
				return next, true
			}
			return readPlainObject(data, i, &c.secondary)
		}
		return i, false
	})
}

// apply writes what was read as encoding/json would have.
func (c *commonAttribute) apply(handle **string, secondary *map[string]string) {
	switch {
	case c.seenHandle && c.handle != nil && *handle != nil:
		**handle = *c.handle // encoding/json writes through a pointer already there
	case c.seenHandle:
		*handle = c.handle
	}
	switch {
	case c.nullSecondary:
		*secondary = nil
	case c.seenSecondary && *secondary == nil:
		*secondary = c.secondary
	case c.seenSecondary:
		for k, v := range c.secondary {
			(*secondary)[k] = v
		}
	}
}

// readNullableString reads a plain string (into a new *string) or null
// (nil) at i.
func readNullableString(data []byte, i int, dst **string) (int, bool) {
	if next, null := jsonscan.Null(data, i); null {
		*dst = nil
		return next, true
	}
	from, to, ok := jsonscan.PlainString(data, i)
	if !ok {
		return i, false
	}
	s := string(data[from:to])
	*dst = &s
	return to + 1, true
}

// readPlainObject reads an object of plain strings at i into a new map.
func readPlainObject(data []byte, i int, dst *map[string]string) (int, bool) {
	m := make(map[string]string, 4)
	end, ok := jsonscan.Object(data, i, func(key []byte, v int) (int, bool) {
		from, to, ok := jsonscan.PlainString(data, v)
		if !ok {
			return v, false
		}
		m[secondaryKey(key)] = string(data[from:to])
		return to + 1, true
	})
	if ok {
		*dst = m
	}
	return end, ok
}

// secondaryKey is key as a string, the one every attribute shares for
// the keys Calico writes: four fewer allocations an attribute.
func secondaryKey(key []byte) string {
	switch string(key) {
	case "namespace":
		return "namespace"
	case "node":
		return "node"
	case "pod":
		return "pod"
	case "timestamp":
		return "timestamp"
	}
	return string(key)
}
