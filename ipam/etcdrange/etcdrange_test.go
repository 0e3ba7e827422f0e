package etcdrange

import (
	"context"
	"fmt"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
)

// Every key under the prefix is read once, in order, at the first
// request's revision; a range of up to a page is one request; and etcd
// walks a few pages' worth of keys per request, where paging over the
// whole rest of the range walks the square (issue 32: the audit of
// 1,000,000 allocations).
func TestScanReadsEveryKeyOnceOverBoundedWindows(t *testing.T) {
	cli := etcdtest.Start(t).Client()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		keys     func(i int) string
		n        int
		requests int // at most
	}{
		{"one page", func(i int) string { return fmt.Sprintf("c%05dp%04d/eth0", i%3, i) }, 100, 1},
		{"hex ids", func(i int) string { return fmt.Sprintf("k8s-pod-network.%064x", i*7919) }, 5000, 200},
		{"nodes and pods", func(i int) string { return fmt.Sprintf("node-%05d/c%05dp%04d/eth0", i/30, i/30, i%30) }, 5000, 200},
		{"mixed shapes", func(i int) string {
			switch i % 3 {
			case 0:
				return fmt.Sprintf("assignment/ipv4/block/10.%d.%d.0-26", i/256, i%256)
			case 1:
				return fmt.Sprintf("handle/k8s-pod-network.%x", i)
			}
			return fmt.Sprintf("host/node1/ipv4/block/10.%d.%d.0-26", i/256, i%256)
		}, 5000, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "/" + tc.name + "/"
			var want []string
			var ops []clientv3.Op
			for i := range tc.n {
				want = append(want, prefix+tc.keys(i))
				ops = append(ops, clientv3.OpPut(want[i], "v"))
				if len(ops) == 100 || i == tc.n-1 {
					if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
						t.Fatal(err)
					}
					ops = ops[:0]
				}
			}
			slices.Sort(want)
			var got []string
			var requests, walked int64
			_, err := Prefix(ctx, cli, prefix, 100, 0, func(resp *clientv3.GetResponse) error {
				requests, walked = requests+1, walked+resp.Count
				for _, kv := range resp.Kvs {
					got = append(got, string(kv.Key))
				}
				if requests == 2 { // written after the first request: not read
					_, err := cli.Put(ctx, prefix+"~later", "v")
					return err
				}
				return nil
			}, clientv3.WithKeysOnly())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("read %d keys, want %d, in order, once each", len(got), len(want))
			}
			t.Logf("%d keys: %d requests, etcd walked %d keys", tc.n, requests, walked)
			// The first request counts the whole range; the rest a few pages each.
			if int(requests) > tc.requests || walked > int64(tc.n)+requests*16*100 {
				t.Errorf("%d requests (want at most %d), etcd walked %d keys for %d", requests, tc.requests, walked, tc.n)
			}
		})
	}
}

func TestSuccessorAndWindow(t *testing.T) {
	for _, tc := range []struct {
		from, end string
		depth     int
		want      string
	}{
		{"/a/b", "/a0", 3, "/a0"},
		{"/a/b", "/a0", 4, "/a/c"},
		{"/a/\xff", "/a0", 4, "/a0"},
		{"/a/b", "", 2, "/b"},
		{"\xff\xff", "", 2, ""},
		{"/a/b", "/a0", 9, "/a/c"},
	} {
		if got := window(tc.from, tc.end, tc.depth); got != tc.want {
			t.Errorf("window(%q, %q, %d) = %q; want %q", tc.from, tc.end, tc.depth, got, tc.want)
		}
	}
}
