package record

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/jsonscan"
)

// Decode decodes a stored record into rec, as encoding/json does. The
// common form, as safe-ipam writes it (plain ASCII strings, the address
// list, the delegate's result, the two times, nothing else), is read
// without reflection: an audit decodes a million records, and
// encoding/json took a fifth of its time. Anything else, or anything
// unexpected, goes to encoding/json, which also says what is wrong.
// FuzzDecode holds the two to the same answer.
func Decode(data []byte, rec *Record) error {
	if decodeCommon(data, rec) {
		return nil
	}
	*rec = Record{}
	return json.Unmarshal(data, rec)
}

// decodeCommon decodes data into rec when it is in the common form, and
// says whether it was; rec is left partly written when not.
func decodeCommon(data []byte, rec *Record) bool {
	*rec = Record{}
	return jsonscan.Fields(data, commonKeys[:], func(n, i int) (int, bool) { return rec.readField(n, data, i) })
}

// commonKeys are the keys of the common form, as Record's tags spell them.
var commonKeys = [...]string{"network", "containerID", "ifName", "podNamespace", "podName", "podUID", "node", "handle", "state", "host", "ips", "created", "updated", "result"}

// readField reads the value at i of the common key numbered n.
func (r *Record) readField(n int, data []byte, i int) (int, bool) {
	switch n {
	case 10:
		return plainStrings(data, i, &r.IPs)
	case 11:
		return readTime(data, i, &r.Created)
	case 12:
		return readTime(data, i, &r.Updated)
	case 13:
		return readBytes(data, i, &r.Result)
	}
	v, next, ok := plainString(data, i)
	switch n {
	case 0:
		r.Network = v
	case 1:
		r.ContainerID = v
	case 2:
		r.IfName = v
	case 3:
		r.PodNamespace = v
	case 4:
		r.PodName = v
	case 5:
		r.PodUID = v
	case 6:
		r.Node = v
	case 7:
		r.Handle = v
	case 8:
		r.State = State(v)
	case 9:
		r.Host = v
	}
	return next, ok
}

// readTime reads a time as encoding/json does: the quoted string, to
// time.Time's own UnmarshalJSON.
func readTime(data []byte, i int, t *time.Time) (int, bool) {
	_, next, ok := plainString(data, i)
	return next, ok && t.UnmarshalJSON(data[i:next]) == nil
}

// readBytes reads a []byte as encoding/json does: standard base64 in a
// string (null leaves it nil).
func readBytes(data []byte, i int, dst *[]byte) (int, bool) {
	if next, ok := jsonscan.Null(data, i); ok {
		return next, true
	}
	from, to, ok := jsonscan.PlainString(data, i)
	if !ok {
		return i, false
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(to-from))
	n, err := base64.StdEncoding.Decode(b, data[from:to])
	if err != nil {
		return i, false
	}
	*dst = b[:n]
	return to + 1, true
}

// plainString reads the JSON string at i when it needs no decoding: no
// escape, no control character, nothing outside ASCII (which encoding/json
// would check, or replace, as UTF-8).
func plainString(data []byte, i int) (string, int, bool) {
	from, to, ok := jsonscan.PlainString(data, i)
	if !ok {
		return "", i, false
	}
	return string(data[from:to]), to + 1, true
}

// plainStrings reads an array of plain strings into dst (empty, not nil,
// for [], as encoding/json).
func plainStrings(data []byte, i int, dst *[]string) (int, bool) {
	out := []string{}
	end, ok := jsonscan.Array(data, i, func(value int) (int, bool) {
		v, next, ok := plainString(data, value)
		out = append(out, v)
		return next, ok
	})
	if ok {
		*dst = out
	}
	return end, ok
}
