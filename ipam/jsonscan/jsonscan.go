// Package jsonscan reads the plain tokens of JSON that safe-ipam and
// Calico write, without reflection: the records' and Calico attributes'
// decoders take their common form with it, and hand anything else to
// encoding/json.
package jsonscan

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

// Digits is where the JSON number at i, an unsigned integer of at most 9
// digits without leading zeros, ends.
func Digits(data []byte, i int) (int, bool) {
	j := i
	for j < len(data) && j-i < 10 && data[j] >= '0' && data[j] <= '9' {
		j++
	}
	n := j - i
	if n == 0 || n > 9 || n > 1 && data[i] == '0' {
		return i, false
	}
	if j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
		return i, false
	}
	return j, true
}
