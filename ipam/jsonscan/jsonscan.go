// Package jsonscan reads the plain tokens of JSON that safe-ipam and
// Calico write, without reflection: the decoders of a record, a Calico
// block and its attributes, and a Calico handle document take their
// common form with it, and hand anything else to encoding/json.
package jsonscan

import "math"

// Space is the index of the first byte at or after i that is not JSON
// white space.
func Space(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// PlainString is where the JSON string at i holds its bytes, when they
// need no decoding: no escape, no control character, only ASCII (which
// encoding/json would check, or replace, as UTF-8). to is the closing
// quote's index.
func PlainString(data []byte, i int) (from, to int, ok bool) {
	if i >= len(data) || data[i] != '"' {
		return 0, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return i + 1, j, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// Null says whether null is at i, and where it ends.
func Null(data []byte, i int) (int, bool) {
	if len(data)-i >= 4 && string(data[i:i+4]) == "null" {
		return i + 4, true
	}
	return i, false
}

// Object walks the JSON object at i, whose keys must be plain strings:
// member is given each key and the index of its value, and says where the
// value ends (and false to stop the walk). Object says where the object
// ends, and false when it is not one it can walk, or member stopped.
func Object(data []byte, i int, member func(key []byte, value int) (int, bool)) (int, bool) {
	if i >= len(data) || data[i] != '{' {
		return i, false
	}
	i = Space(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, true
	}
	for {
		from, to, ok := PlainString(data, i)
		if !ok {
			return i, false
		}
		if i = Space(data, to+1); i >= len(data) || data[i] != ':' {
			return i, false
		}
		if i, ok = member(data[from:to], Space(data, i+1)); !ok {
			return i, false
		}
		switch i = Space(data, i); {
		case i < len(data) && data[i] == ',':
			i = Space(data, i+1)
		case i < len(data) && data[i] == '}':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// Document walks data, which must be one JSON object and nothing else,
// as Object does.
func Document(data []byte, member func(key []byte, value int) (int, bool)) bool {
	end, ok := Object(data, Space(data, 0), member)
	return ok && Space(data, end) == len(data)
}

// Bool reads true or false at i into dst.
func Bool(data []byte, i int, dst *bool) (int, bool) {
	switch {
	case len(data)-i >= 4 && string(data[i:i+4]) == "true":
		*dst = true
		return i + 4, true
	case len(data)-i >= 5 && string(data[i:i+5]) == "false":
		*dst = false
		return i + 5, true
	}
	return i, false
}

// Array walks the JSON array at i: elem is given the index of each
// element and says where it ends (and false to stop the walk). Array says
// where the array ends, and false when it is not one it can walk, or
// elem stopped.
func Array(data []byte, i int, elem func(value int) (int, bool)) (int, bool) {
	if i >= len(data) || data[i] != '[' {
		return i, false
	}
	i = Space(data, i+1)
	if i < len(data) && data[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = elem(i); !ok {
			return i, false
		}
		switch i = Space(data, i); {
		case i < len(data) && data[i] == ',':
			i = Space(data, i+1)
		case i < len(data) && data[i] == ']':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// Uint reads the JSON number at i when it is an unsigned integer that
// fits in 64 bits (no sign, fraction or exponent).
func Uint(data []byte, i int) (uint64, int, bool) {
	j := i
	var v uint64
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		d := uint64(data[j] - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, i, false
		}
		v = v*10 + d
		j++
	}
	if j == i || j-i > 1 && data[i] == '0' || j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
		return 0, i, false
	}
	return v, j, true
}

// Fields walks data, one JSON object and nothing else, whose keys must be
// among keys (at most 64), each at most once: read is given each key's
// number in keys and the index of its value, and says where the value
// ends. Fields says whether data was such an object and read took it all.
func Fields(data []byte, keys []string, read func(n, value int) (int, bool)) bool {
	if len(keys) > 64 {
		return false // more than seen can tell apart
	}
	var seen uint64
	return Document(data, func(key []byte, i int) (int, bool) {
		n := -1
		for k, name := range keys {
			if string(key) == name {
				n = k
				break
			}
		}
		if n < 0 || seen&(1<<n) != 0 {
			return i, false // a key it does not take, or one twice
		}
		seen |= 1 << n
		return read(n, i)
	})
}
