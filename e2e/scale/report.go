package scale

import (
	"fmt"
	"io"
	"math"
	"time"

	admindetect "github.com/safe-ipam/safe-ipam/ipam/admin/detect"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

// The deployment's periods: gc's --every as the manifest writes it, and
// the watch's full check (the readiness probe reads its verdict and asks
// no one).
const (
	GCPeriod    = 5 * time.Minute
	CheckPeriod = install.RemoteCheckEvery
)

// Page sizes of the sweep's listings (keys alone): record keys, and
// Calico's Node keys.
const (
	recordKeysPage = 10000
	nodeKeysPage   = 5000
	// claimsPage is the claims sweep's page of AddressClaims, and
	// kubeNodesPage the Kubernetes datastore's of Nodes.
	claimsPage    = 500
	kubeNodesPage = 2000
)

// Load is the steady state on Calico's datastore.
type Load struct {
	Nodes, Pods   int
	Requests, MBs float64
}

// Extrapolate is the steady state at nodes x pods from what one run
// measured (at Opts.Nodes x Opts.Pods):
//
//	requests/s = ((N-1)·f + l(N,P)) / T  +  N·c / W
//	bytes/s    = ((N-1)·fb·P/P0 + lb·(N·P)/(N0·P0)) / T  +  N·cb·P/P0 / W
//
// with T gc's period, W the watch's full-check period; f, fb a follower's
// gc round (its own records, and who leads); l, lb the leader's round
// (its own records, then the sweep: on etcd every record key, Calico's
// Node keys, the notes; on the Kubernetes datastore every AddressClaim,
// the Nodes, the Lease), l growing by one request per page; c, cb
// one of the watch's later full checks (it remembers what cannot change).
// The bytes of a round grow with the records it reads: scaling the whole
// measured round with them is an upper bound. The readiness probe adds
// nothing: it asks no store or datastore.
func (r *Result) Extrapolate(nodes, pods int) Load { return r.extrapolate(nodes, pods, r.Watch) }

// Bound is Extrapolate with every full check as costly as the first (c,
// cb the check by hand, which remembers nothing): every watch restarted,
// or a new pod on every node, between any two checks. The target is
// judged by it.
func (r *Result) Bound(nodes, pods int) Load { return r.extrapolate(nodes, pods, r.Check) }

func (r *Result) extrapolate(nodes, pods int, check Served) Load {
	n0p0 := float64(r.Opts.Nodes * r.Opts.Pods)
	n, p := float64(nodes), float64(pods)
	pages := func(items, page float64) float64 { return math.Ceil(items / page) }
	lead := r.Leader.Requests
	if r.Opts.Datastore == datastore.Etcd {
		lead += pages(n*p, recordKeysPage) - pages(n0p0, recordKeysPage) + pages(n, nodeKeysPage) - pages(float64(r.Opts.Nodes), nodeKeysPage)
	} else {
		lead += pages(n*p, claimsPage) - pages(n0p0, claimsPage) + pages(n, kubeNodesPage) - pages(float64(r.Opts.Nodes), kubeNodesPage)
	}
	t, w := GCPeriod.Seconds(), CheckPeriod.Seconds()
	growth := p / float64(r.Opts.Pods)
	req := ((n-1)*r.Follower.Requests+lead)/t + n*check.Requests/w
	bytes := ((n-1)*r.Follower.Bytes*growth+r.Leader.Bytes*n*p/n0p0)/t + n*check.Bytes*growth/w
	return Load{Nodes: nodes, Pods: pods, Requests: req, MBs: bytes / 1e6}
}

// Targets are issue 32's, at 5,000 nodes x 100 pods: requests/s on
// either datastore, MB/s on etcd.
const (
	TargetRequests = 100.0
	TargetMBs      = 5.0
)

// Meets says whether the bound at 5,000 x 100 meets the targets.
func (r *Result) Meets() bool {
	big := r.Bound(5000, 100)
	return big.Requests <= TargetRequests && (r.Opts.Datastore != datastore.Etcd || big.MBs <= TargetMBs)
}

// WriteTable prints what was measured, the formula, and the
// extrapolations.
func (r *Result) WriteTable(w io.Writer) {
	o := r.Opts
	fmt.Fprintf(w, "scale (%s): %d nodes x %d pods (blocks /%d); %d simulated nodes ran deploy/safe-ipam.yaml's commands (gc --every %s, scaled from %s; the watch's later full checks every %s, scaled from %s)\n",
		o.Datastore, o.Nodes, o.Pods, o.BlockSize, o.Simulated, o.Every, GCPeriod, o.Every, CheckPeriod)
	fmt.Fprintf(w, "\nmeasured on %s:\n", r.About)
	fmt.Fprintf(w, "  %-50s %10s %12s\n", "", "requests", "bytes")
	row := func(what string, s Served) { fmt.Fprintf(w, "  %-50s %10.1f %12.0f\n", what, s.Requests, s.Bytes) }
	row("gc round, elected node (own records + sweep)", r.Leader)
	row("gc round, any other node", r.Follower)
	row("watch full check, the first (doctor by hand)", r.Check)
	row("watch full check, a later one (every "+CheckPeriod.String()+")", r.Watch)
	row(fmt.Sprintf("readiness probe, all %d runs", r.Probes), r.Probe)
	if o.Datastore == datastore.Etcd {
		fmt.Fprintf(w, "  nodes that listed other nodes' records while all gc ran: %v (of %d)\n", r.Listers, o.Simulated)
		fmt.Fprintf(w, "  a forgotten node's records released after %s (%d gc rounds); after the leader stopped, %s (%d rounds) (gc period %s)\n",
			r.Released.Round(time.Millisecond), r.ReleasedRounds, r.ReleasedAfterFailover.Round(time.Millisecond), r.ReleasedRoundsAfterFailover, o.Every)
	} else {
		fmt.Fprintf(w, "  (records live on each node: no gc reads another node's; the elected gc lists every AddressClaim, a dead node's go with the sweep)\n")
		per := 0.0
		if r.Claims > 0 {
			per = float64(r.ClaimBytes) / float64(r.Claims)
		}
		fmt.Fprintf(w, "  AddressClaims in the API server's etcd: %d, %d bytes (%.0f each, as JSON); at 5,000 nodes x 100 pods: 500,000, %.0f MB\n",
			r.Claims, r.ClaimBytes, per, per*500000/1e6)
	}
	fmt.Fprintf(w, "\nformula (N nodes, P pods each; T = %s, W = %s; c = a later full check, or the first for the bound):\n", GCPeriod, CheckPeriod)
	fmt.Fprintf(w, "  requests/s = ((N-1)*%.1f + %.1f + pages) / T + N*c / W,  c = %.1f (bound %.1f)\n", r.Follower.Requests, r.Leader.Requests, r.Watch.Requests, r.Check.Requests)
	fmt.Fprintf(w, "  bytes/s    = ((N-1)*%.0f*P/%d + %.0f*N*P/%d) / T + N*cb*P/%d / W,  cb = %.0f (bound %.0f)\n",
		r.Follower.Bytes, o.Pods, r.Leader.Bytes, o.Nodes*o.Pods, o.Pods, r.Watch.Bytes, r.Check.Bytes)
	if o.Datastore == datastore.Etcd {
		fmt.Fprintf(w, "  (pages: one more request per %d record keys and per %d Node keys in the sweep; the probe adds 0)\n\n", recordKeysPage, nodeKeysPage)
	} else {
		fmt.Fprintf(w, "  (pages: one more request per %d AddressClaims and per %d Nodes in the claims sweep; the probe adds 0)\n\n", claimsPage, kubeNodesPage)
	}
	fmt.Fprintf(w, "  %-22s %14s %10s %16s %12s\n", "cluster", "requests/s", "MB/s", "bound req/s", "bound MB/s")
	for i, c := range [][2]int{{o.Nodes, o.Pods}, {500, 30}, {1000, 50}, {5000, 100}} {
		if i > 0 && c == [2]int{o.Nodes, o.Pods} {
			continue
		}
		l, b := r.Extrapolate(c[0], c[1]), r.Bound(c[0], c[1])
		fmt.Fprintf(w, "  %-22s %14.1f %10.3f %16.1f %12.3f\n", fmt.Sprintf("%d nodes x %d pods", l.Nodes, l.Pods), l.Requests, l.MBs, b.Requests, b.MBs)
	}
	big := r.Bound(5000, 100)
	verdict := "meets"
	if !r.Meets() {
		verdict = "MISSES"
	}
	target := fmt.Sprintf("<= %.0f requests/s", TargetRequests)
	if o.Datastore == datastore.Etcd {
		target += fmt.Sprintf(", <= %.0f MB/s", TargetMBs)
	}
	fmt.Fprintf(w, "\nat 5000 x 100, bound: %.1f requests/s, %.3f MB/s: %s the target (%s)\n", big.Requests, big.MBs, verdict, target)
}

// DetectPeriod is safe-ipam detect's --every in its Deployment: one
// round a period, by the one elected instance of the cluster.
const DetectPeriod = 2 * time.Minute

// calicoScanPage is the page of Calico's datastore scan
// (datastore.EtcdStore's keys, datastore.KubeStore's objects).
const calicoScanPage = 2000

// DetectTargetKiB is issue 47's bound on the instance's memory at
// 500,000 pods.
const DetectTargetKiB = 1 << 20

// podPages are the requests of the round's listing of pods pods, 500 a
// page.
func podPages(pods int) float64 { return max(1, math.Ceil(float64(pods)/admindetect.DefaultPage)) }

// calicoBlocks are the blocks of Calico's IPAM data at nodes x pods, all
// its scan reads (snapshot.LoadAllocations): each node's pods fill its own.
func (r *DetectResult) calicoBlocks(nodes, pods int) float64 {
	size := 1 << (32 - r.Opts.BlockSize)
	return float64(nodes * ((pods + size - 1) / size))
}

// calicoRequests are the requests of Calico's scan at nodes x pods. On
// the Kubernetes datastore a page of 2,000 IPAMBlocks is a request: the
// measured ones less its pages at the measured size, plus those at N x
// P. On etcd each request reads a window of the blocks' keys (package
// etcdrange), which held 435 blocks on average at 10,000: the measured
// requests grow with the blocks, at least one. Grown from a round whose
// blocks fit in one request, that overstates them; performance.md's rows
// are grown from the 500,000-pod round.
func (r *DetectResult) calicoRequests(nodes, pods int) float64 {
	if r.Opts.Datastore == datastore.Kubernetes {
		return r.Calico.Requests - r.blockPages(r.Opts.Nodes, r.Opts.Pods) + r.blockPages(nodes, pods)
	}
	return max(1, r.Calico.Requests*r.calicoBlocks(nodes, pods)/r.calicoBlocks(r.Opts.Nodes, r.Opts.Pods))
}

// blockPages are the pages of 2,000 IPAMBlocks, at least one.
func (r *DetectResult) blockPages(nodes, pods int) float64 {
	return max(1, math.Ceil(r.calicoBlocks(nodes, pods)/calicoScanPage))
}

// Extrapolate is one round at nodes x pods from the measured one:
//
//	requests = e + p - pages(N0·P0) + pages(N·P) + c(N,P)
//	bytes    = b · N·P / (N0·P0)
//
// with p the measured listing of pods, pages(n) its pages of 500; e the
// Events (none on a clean cluster); c Calico's scan (on the Kubernetes
// datastore its measured requests less its pages of 2,000 at the
// measured size, plus those at N x P; on etcd its measured requests grown
// with its keys); b the round's bytes: each listing reads what grows with
// the pods and their addresses. One instance per cluster: nothing grows
// with N². Per second, both are divided by DetectPeriod.
func (r *DetectResult) Extrapolate(nodes, pods int) Served {
	return r.PodsAt(nodes, pods).Add(r.CalicoAt(nodes, pods))
}

// PodsAt is the round's part at nodes x pods that the API server serves
// on either datastore: the listing of the pods, and the Events.
func (r *DetectResult) PodsAt(nodes, pods int) Served {
	served := r.PodList.Add(r.Events)
	return Served{Requests: served.Requests - podPages(r.Opts.Nodes*r.Opts.Pods) + podPages(nodes*pods), Bytes: served.Bytes * r.growth(nodes, pods)}
}

// CalicoAt is the round's scan of Calico's IPAM data at nodes x pods.
func (r *DetectResult) CalicoAt(nodes, pods int) Served {
	return Served{Requests: r.calicoRequests(nodes, pods), Bytes: r.Calico.Bytes * r.growth(nodes, pods)}
}

// growth is how many times the measured pods nodes x pods are.
func (r *DetectResult) growth(nodes, pods int) float64 {
	return float64(nodes*pods) / float64(r.Opts.Nodes*r.Opts.Pods)
}

// WriteTable prints the round measured, the formula and the
// extrapolations.
func (r *DetectResult) WriteTable(w io.Writer) {
	o := r.Opts
	fmt.Fprintf(w, "detect (%s): %d nodes x %d pods: %d running pods (%d bytes each as JSON), %d allocations in %d /%d blocks; one round of `safe-ipam detect` (the admin binary, once), as the elected instance runs it every %s\n",
		o.Datastore, o.Nodes, o.Pods, r.Pods, r.PodBytes, r.Allocations, r.Blocks, o.BlockSize, DetectPeriod)
	fmt.Fprintf(w, "\nmeasured on %s:\n", r.About)
	fmt.Fprintf(w, "  %-50s %10s %12s\n", "", "requests", "bytes")
	row := func(what string, s Served) { fmt.Fprintf(w, "  %-50s %10.0f %12.0f\n", what, s.Requests, s.Bytes) }
	row(fmt.Sprintf("the pods (LIST, %d a page)", admindetect.DefaultPage), r.PodList)
	row("Events (none on a clean cluster)", r.Events)
	row("Calico's IPAM data (one scan)", r.Calico)
	row("the round", r.Round())
	verdict := "clean"
	if r.Exit != 0 {
		verdict = "NOT clean:\n" + r.Output
	}
	fmt.Fprintf(w, "  the round took %.1f s; peak RSS %d MiB (%.2f KiB a pod); exit %d, %s\n", r.Seconds, r.PeakRSSKiB>>10, float64(r.PeakRSSKiB)/float64(max(r.Pods, 1)), r.Exit, verdict)
	round := r.Round()
	fmt.Fprintf(w, "\nformula (N nodes, P pods each; T = %s, one instance per cluster):\n", DetectPeriod)
	fmt.Fprintf(w, "  requests/round = %.0f - %.0f + pages(N*P) + c(N,P),  bytes/round = %.0f * N*P/%d;  per second: / T\n",
		r.Events.Requests+r.PodList.Requests, podPages(o.Nodes*o.Pods), round.Bytes, o.Nodes*o.Pods)
	if o.Datastore == datastore.Kubernetes {
		fmt.Fprintf(w, "  (pages: one per %d pods; c = %.0f - %.0f + one per %d IPAMBlocks, all of Calico's IPAM data it reads)\n\n",
			admindetect.DefaultPage, r.Calico.Requests, r.blockPages(o.Nodes, o.Pods), calicoScanPage)
	} else {
		fmt.Fprintf(w, "  (pages: one per %d pods; c = %.0f * B/%.0f, at least 1, B Calico's blocks, all of its IPAM data it reads)\n\n",
			admindetect.DefaultPage, r.Calico.Requests, r.calicoBlocks(o.Nodes, o.Pods))
	}
	fmt.Fprintf(w, "  %-22s %16s %10s %12s %10s\n", "cluster", "requests/round", "MB/round", "requests/s", "MB/s")
	t := DetectPeriod.Seconds()
	for i, c := range [][2]int{{o.Nodes, o.Pods}, {500, 30}, {1000, 50}, {5000, 100}} {
		if i > 0 && c == [2]int{o.Nodes, o.Pods} {
			continue
		}
		s := r.Extrapolate(c[0], c[1])
		fmt.Fprintf(w, "  %-22s %16.0f %10.1f %12.2f %10.3f\n", fmt.Sprintf("%d nodes x %d pods", c[0], c[1]), s.Requests, s.Bytes/1e6, s.Requests/t, s.Bytes/1e6/t)
	}
	p, c := r.PodsAt(5000, 100).Div(t), r.CalicoAt(5000, 100).Div(t)
	calicoServer := "its etcd"
	if o.Datastore == datastore.Kubernetes {
		calicoServer = "the API server"
	}
	fmt.Fprintf(w, "  at 5000 x 100, per second: the pods %.2f requests, %.3f MB from the API server; Calico's scan %.2f requests, %.3f MB from %s\n",
		p.Requests, p.Bytes/1e6, c.Requests, c.Bytes/1e6, calicoServer)
	if r.Pods >= 500_000 {
		verdict := "meets"
		if r.PeakRSSKiB >= DetectTargetKiB {
			verdict = "MISSES"
		}
		fmt.Fprintf(w, "\nat %d pods, peak RSS %d MiB: %s the target (under 1 GiB at 500,000 pods)\n", r.Pods, r.PeakRSSKiB>>10, verdict)
	} else {
		fmt.Fprintf(w, "\nthe memory target (under 1 GiB at 500,000 pods) is measured at that size: -detect -nodes 5000 -pods 100\n")
	}
}
