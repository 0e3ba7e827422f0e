package scale_test

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/e2e/harness/scaffold"
	"github.com/safe-ipam/safe-ipam/e2e/scale"
)

var bin string

func TestMain(m *testing.M) {
	(&scaffold.Suite{Name: "scale", Build: func(ctx context.Context, dir string) error {
		bin = dir
		return gobuild.Build{Out: dir + string(filepath.Separator), Pkgs: []string{"github.com/safe-ipam/safe-ipam/plugin/safe-ipam",
			"github.com/safe-ipam/safe-ipam/plugin/safe-ipam-etcd", "github.com/safe-ipam/safe-ipam/plugin/safe-ipam-admin",
			"github.com/safe-ipam/safe-ipam/e2e/cmd/calico-ipam", "github.com/safe-ipam/safe-ipam/e2e/cmd/peakrss"}}.Run(ctx)
	}}).Main(m)
}

// make scale's small configuration: several nodes run the DaemonSet's gc
// and watch as deploy/safe-ipam.yaml writes them, against one etcd. Only
// one gc lists other nodes' records in a period; a node Calico forgot
// loses its records within two gc rounds, also after the leader stopped;
// the readiness probe makes no request (issue 32).
func TestScaleSmall(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	const every = 3 * time.Second
	res, err := scale.Run(context.Background(), scale.Options{Nodes: 64, Pods: 8, Simulated: 3, Every: every, Periods: 2,
		Bin: bin, Manifest: filepath.Join("..", "..", "deploy", "safe-ipam.yaml"), Dir: dir, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var table strings.Builder
	res.WriteTable(&table)
	t.Log(table.String())
	if len(res.Listers) != 1 {
		t.Errorf("nodes that listed other nodes' records (at least %d bytes of their keys) while every gc ran: %v; want one", res.OtherKeyBytes, res.Listers)
	}
	if res.Probe.Requests != 0 || res.Probes == 0 {
		t.Errorf("%d readiness probes made %v requests to etcd; want none", res.Probes, res.Probe.Requests)
	}
	// Counted in the rounds the gc finished, not in seconds: a busy
	// machine slows rounds, not the count. The sweep that finds the node
	// gone and the one after the grace, and the round under way when
	// Calico forgot it (it finishes, without seeing the node gone).
	const rounds = 3
	if res.ReleasedRounds > rounds || res.ReleasedRoundsAfterFailover > rounds {
		t.Errorf("a forgotten node's records went after %d gc rounds (%s), after the leader stopped %d (%s); want within two sweeps (%d rounds)",
			res.ReleasedRounds, res.Released, res.ReleasedRoundsAfterFailover, res.ReleasedAfterFailover, rounds)
	}
	if res.Watch.Requests == 0 || res.Watch.Requests > res.Check.Requests {
		t.Errorf("a later full check of the watch made %v requests, the first %v; want some, no more than the first", res.Watch.Requests, res.Check.Requests)
	}
	if res.Follower.Requests >= res.Leader.Requests {
		t.Errorf("a follower's round (%v) costs as much as the leader's (%v)", res.Follower, res.Leader)
	}
}

// make scale's small configuration on the Kubernetes datastore: a real
// kube-apiserver with Calico's CRDs and deploy/safe-ipam-claims.yaml, the
// records in each node's file store, every pod's address claimed. A gc
// round of a node that does not lead asks little (its own claims, who
// leads), the elected one lists every claim and Node besides; the
// readiness probe asks nothing, and the watch's later full checks read
// less than the first, which walks the block sizes up to the pool's
// non-default /28 (issues 32 and 45).
func TestScaleSmallKubernetes(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	res, err := scale.Run(context.Background(), scale.Options{Datastore: "kubernetes", Nodes: 64, Pods: 8, BlockSize: 28, Simulated: 3,
		Every: 3 * time.Second, Periods: 2, Bin: bin, Manifest: filepath.Join("..", "..", "deploy", "safe-ipam.yaml"), Dir: dir, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var table strings.Builder
	res.WriteTable(&table)
	t.Log(table.String())
	if res.Follower.Requests == 0 || res.Follower.Requests > 4 || res.Leader.Requests <= res.Follower.Requests {
		t.Errorf("gc rounds asked the API server %v (the elected node's) and %v (any other's); want a few requests of a follower, more of the leader (the sweep)", res.Leader, res.Follower)
	}
	if res.Claims != 64*8 || res.ClaimBytes < int64(res.Claims)*200 {
		t.Errorf("%d AddressClaims of %d bytes planted; want %d, of some hundred bytes each", res.Claims, res.ClaimBytes, 64*8)
	}
	if res.Probe.Requests != 0 || res.Probes == 0 {
		t.Errorf("%d readiness probes made %v requests to the API server; want none", res.Probes, res.Probe.Requests)
	}
	if res.Watch.Requests == 0 || res.Watch.Requests > 2 || res.Check.Requests <= res.Watch.Requests {
		t.Errorf("a later full check of the watch made %v requests, the first %v; want the Node and one block (2), fewer than the first", res.Watch.Requests, res.Check.Requests)
	}
}

// make scale-detect's small configuration, on both datastores: one round
// of safe-ipam detect (the admin binary, once) against 600 running pods
// on 20 nodes, their addresses in Calico's /28 blocks (two a node). The
// planted cluster is clean (exit 0, no Event posted); the round lists
// the pods a page of 500 at a time and Calico's blocks alone in one
// request (etcd: one range; the Kubernetes datastore: one list of
// IPAMBlocks), no handle; the extrapolation adds a request a page of
// pods, and of 2,000 IPAMBlocks, and on etcd grows Calico's requests
// with its blocks (issue 47's cost). Its peak RSS is
// reported, not judged: the target is at 500,000 pods.
func TestDetectSmall(t *testing.T) {
	for _, ds := range []string{"etcdv3", "kubernetes"} {
		t.Run(ds, func(t *testing.T) {
			t.Parallel()
			var log strings.Builder
			res, err := scale.MeasureDetect(context.Background(), scale.DetectOptions{Datastore: ds, Nodes: 20, Pods: 30, BlockSize: 28,
				Bin: bin, Dir: t.TempDir(), Log: &log})
			if err != nil {
				t.Fatalf("%v\n%s", err, log.String())
			}
			var table strings.Builder
			res.WriteTable(&table)
			t.Log(table.String())
			if res.Exit != 0 || res.Events.Requests != 0 {
				t.Errorf("a clean cluster: exit %d, %v Event requests; want 0 and none\n%s", res.Exit, res.Events.Requests, res.Output)
			}
			if res.Pods != 600 || res.Allocations != 600 || res.Blocks != 40 || res.PodBytes < 2000 {
				t.Errorf("planted %d pods of %d bytes, %d allocations in %d blocks; want 600 pods of a real pod's size (some KB), 600 allocations in 40 blocks",
					res.Pods, res.PodBytes, res.Allocations, res.Blocks)
			}
			if res.PodList.Requests != 2 || res.PodList.Bytes < 600*100 {
				t.Errorf("the pods' listing: %v; want 2 pages (600 pods, 500 a page) of some hundred bytes a pod", res.PodList)
			}
			// 40 blocks, 600 allocations: each allocation's attributes
			// are some hundred bytes of its block (some tens, as the API
			// server compresses the list).
			if res.Calico.Requests != 1 || res.Calico.Bytes < 600*20 {
				t.Errorf("Calico's scan: %v; want 1 request of some tens of bytes an allocation or more", res.Calico)
			}
			if res.PeakRSSKiB == 0 {
				t.Error("no peak RSS read")
			}
			// 500,000 pods: 1,000 pages of pods; Calico's 35,000 /28
			// blocks: on Kubernetes 2,000 a page; on etcd the scan's
			// requests grown with the blocks (35,000 of 40).
			big := res.Extrapolate(5000, 100)
			want := map[string]float64{"etcdv3": 1000 + res.Calico.Requests*35_000/40, "kubernetes": 1000 + 18}[ds]
			if math.Abs(big.Requests-want) > 1e-6 || math.Abs(big.Bytes/(res.Round().Bytes*500_000/600)-1) > 1e-9 {
				t.Errorf("a round at 5,000 x 100: %v; want %v requests and the bytes grown with the pods", big, want)
			}
		})
	}
}
