// Package etcdrange reads a large etcd key range page by page at one
// revision, each request over a window of the range that holds about a
// page of keys. etcd counts every key of a request's range, whatever its
// limit: paging a million keys each over the whole rest of the range made
// etcd walk half a million keys per page, the square of the keys in all
// (a 1,000,000-allocation audit spent minutes on it). A window's end is
// where the keys' common prefix with the last key read ends, one level
// deeper or shallower as the windows come out fuller or emptier than a
// page, so etcd walks a few pages' worth of keys per request.
package etcdrange

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Get reads the keys of [from, to) at rev (0: now), at most limit of them,
// with the caller's own options (keys only, a Txn with another read).
type Get func(ctx context.Context, from, to string, limit, rev int64) (*clientv3.GetResponse, error)

// Scan reads [from, end) through get, limit keys a request, and hands each
// response to each in key order. The first request reads at rev (0: now)
// over the whole range, so a range of up to limit keys is one request;
// later ones read at the first's revision, which Scan returns. The next
// page is read while each takes the last: etcd serves one while the
// caller decodes the other.
func Scan(ctx context.Context, get Get, from, end string, limit, rev int64, each func(*clientv3.GetResponse) error) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := windows{from: from, end: end, to: end, depth: len(from), limit: limit, first: true}
	resp, err := get(ctx, w.from, w.to, limit, rev)
	for {
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		var next chan page
		if w.advance(resp) {
			next = make(chan page, 1)
			go func(from, to string, at int64) {
				r, err := get(ctx, from, to, limit, at)
				next <- page{r, err}
			}(w.from, w.to, rev)
		}
		if err := each(resp); err != nil {
			return 0, err
		}
		if next == nil {
			return rev, nil
		}
		p := <-next
		resp, err = p.resp, p.err
	}
}

type page struct {
	resp *clientv3.GetResponse
	err  error
}

// windows is where a Scan is: the next window [from, to) of [.., end).
type windows struct {
	from, end, to string
	depth         int
	limit         int64
	first         bool
}

// advance moves past resp, the page of the window it was read from;
// false when the range is read.
func (w *windows) advance(resp *clientv3.GetResponse) bool {
	kvs := resp.Kvs
	switch {
	case resp.More && len(kvs) > 0:
		last := string(kvs[len(kvs)-1].Key)
		if w.first || resp.Count > 2*w.limit {
			// This window held pages more: the next ends where the keys
			// of this page part, which held about a page.
			w.depth = max(w.depth+1, commonPrefix(string(kvs[0].Key), last)+1)
		}
		w.from = last + "\x00"
	case w.to == w.end:
		return false
	default: // the window is read
		if resp.Count < w.limit/2 && w.depth > 1 {
			w.depth-- // the window held little: widen the next
		}
		w.from = w.to
	}
	w.first = false
	if w.end != "" && w.from >= w.end {
		return false
	}
	w.to = window(w.from, w.end, w.depth)
	return true
}

// window is the end of the window from from: past every key that shares
// from's first depth bytes, and no further than end ("" is no end).
func window(from, end string, depth int) string {
	next := successor(from[:min(depth, len(from))])
	if next == "" || (end != "" && next > end) {
		return end
	}
	return next
}

// successor is the first key past every key with prefix p, "" when none
// is (p is empty or all 0xff).
func successor(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Prefix is Scan of every key under prefix with plain Gets and opts (such
// as clientv3.WithKeysOnly()).
func Prefix(ctx context.Context, cli *clientv3.Client, prefix string, limit, rev int64, each func(*clientv3.GetResponse) error, opts ...clientv3.OpOption) (int64, error) {
	get := func(ctx context.Context, from, to string, limit, rev int64) (*clientv3.GetResponse, error) {
		return cli.Get(ctx, from, Options(to, limit, rev, opts...)...)
	}
	return Scan(ctx, get, prefix, clientv3.GetPrefixRangeEnd(prefix), limit, rev, each)
}

// Options are a window's Get options: [from, to) ("" to: every key from
// from on), at most limit keys, at rev unless it is 0, and opts.
func Options(to string, limit, rev int64, opts ...clientv3.OpOption) []clientv3.OpOption {
	out := append([]clientv3.OpOption{clientv3.WithLimit(limit)}, opts...)
	if to == "" {
		out = append(out, clientv3.WithFromKey())
	} else {
		out = append(out, clientv3.WithRange(to))
	}
	if rev != 0 {
		out = append(out, clientv3.WithRev(rev))
	}
	return out
}
