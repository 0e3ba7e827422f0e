package etcdrange

import (
	"errors"
	"fmt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Decode gives each key's result in key order, whatever the page's size
// and however many CPUs decode it.
func TestDecodeKeepsKeyOrder(t *testing.T) {
	for _, n := range []int{0, 1, minParallel - 1, minParallel, 2*minParallel + 1, 5000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			kvs := make([]*mvccpb.KeyValue, n)
			for i := range kvs {
				kvs[i] = &mvccpb.KeyValue{Key: []byte(fmt.Sprintf("k%06d", i)), ModRevision: int64(i)}
			}
			got := Decode(kvs, func(kv *mvccpb.KeyValue) string { return string(kv.Key) })
			if len(got) != n {
				t.Fatalf("%d results; want %d", len(got), n)
			}
			for i, k := range got {
				if want := fmt.Sprintf("k%06d", i); k != want {
					t.Fatalf("result %d is %s; want %s", i, k, want)
				}
			}
		})
	}
}

// Pipeline keeps every key of every page in key order, the last page at
// flush, and stops at keep's first error.
func TestPipelineKeepsPagesInOrder(t *testing.T) {
	page := func(from, n int) *clientv3.GetResponse {
		r := &clientv3.GetResponse{}
		for i := from; i < from+n; i++ {
			r.Kvs = append(r.Kvs, &mvccpb.KeyValue{Key: []byte(fmt.Sprintf("k%06d", i))})
		}
		return r
	}
	var kept []string
	stop := errors.New("stop")
	each, flush := Pipeline(func(kv *mvccpb.KeyValue) string { return string(kv.Key) }, func(k string) error {
		if k == "k001500" {
			return stop
		}
		kept = append(kept, k)
		return nil
	})
	for i, n := range []int{1000, 300, 1} {
		if err := each(page(i*1000, n)); err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
	}
	if err := flush(); err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1301 || kept[1000] != "k001000" || kept[1300] != "k002000" {
		t.Fatalf("kept %d keys (%v ...); want the 1301 in key order", len(kept), kept[:3])
	}
	for i := 1; i < len(kept); i++ {
		if kept[i] <= kept[i-1] {
			t.Fatalf("key %d %s after %s", i, kept[i], kept[i-1])
		}
	}

	each, _ = Pipeline(func(kv *mvccpb.KeyValue) string { return string(kv.Key) }, func(k string) error {
		if k == "k000500" {
			return stop
		}
		return nil
	})
	if err := each(page(0, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := each(page(1000, 10)); !errors.Is(err, stop) {
		t.Fatalf("the page after the one keep refused: %v; want %v", err, stop)
	}
}
