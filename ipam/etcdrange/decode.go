package etcdrange

import (
	"runtime"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// minParallel is the page below which Decode works alone: a node's own
// listing, a page or less, is not worth the goroutines.
const minParallel = 256

// Decode is decode of each of kvs, in order, on every CPU the process
// may use: a large scan spends most of its time decoding JSON, which
// needs nothing from the other keys, while what it keeps from each (an
// interned name, an index) must be added in key order by the caller.
func Decode[T any](kvs []*mvccpb.KeyValue, decode func(*mvccpb.KeyValue) T) []T {
	out := make([]T, len(kvs))
	workers := min(runtime.GOMAXPROCS(0), len(kvs)/minParallel)
	if workers <= 1 {
		for i, kv := range kvs {
			out[i] = decode(kv)
		}
		return out
	}
	var wg sync.WaitGroup
	step := (len(kvs) + workers - 1) / workers
	for from := 0; from < len(kvs); from += step {
		wg.Go(func() {
			for i := from; i < min(from+step, len(kvs)); i++ {
				out[i] = decode(kvs[i])
			}
		})
	}
	wg.Wait()
	return out
}

// Pipeline is a Scan's each and its flush, for a scan that decodes every
// key and keeps what it decoded in key order: each page is decoded (by
// Decode) while keep takes the page before, and the next is read, so
// the decoding, the keeping and etcd's serving overlap. flush keeps the
// last page once the Scan is done (after a failed read too: the page
// before it); keep's first error stops both.
func Pipeline[T any](decode func(*mvccpb.KeyValue) T, keep func(T) error) (each func(*clientv3.GetResponse) error, flush func() error) {
	var pending chan []T
	keepPending := func() error {
		if pending == nil {
			return nil
		}
		page := <-pending
		pending = nil
		for _, d := range page {
			if err := keep(d); err != nil {
				return err
			}
		}
		return nil
	}
	each = func(resp *clientv3.GetResponse) error {
		next := make(chan []T, 1) // its goroutine never waits on a stopped scan
		go func() { next <- Decode(resp.Kvs, decode) }()
		err := keepPending()
		pending = next
		return err
	}
	return each, keepPending
}
