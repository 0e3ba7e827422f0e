// Command scale is `make scale`: what safe-ipam's periodic work costs
// Calico's datastore, measured on a real etcd or kube-apiserver with
// several simulated nodes and extrapolated to 1,000 and 5,000 nodes. See
// package scale. With -audit N (`make scale-audit`) it measures instead
// `safe-ipam audit` of N allocations and records in Calico's etcd; with
// -detect (`make scale-detect`), one round of `safe-ipam detect` against
// the nodes' pods and their addresses in Calico's datastore.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/bench"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/e2e/scale"
)

func main() {
	o := scale.Options{Log: os.Stderr}
	flag.StringVar(&o.Datastore, "datastore", "etcdv3", "Calico's datastore: etcdv3 (a real etcd), or kubernetes (a real kube-apiserver with Calico's CRDs)")
	flag.IntVar(&o.Nodes, "nodes", 500, "nodes planted: Calico's Nodes and safe-ipam's records")
	flag.IntVar(&o.Pods, "pods", 30, "records per planted node")
	flag.IntVar(&o.BlockSize, "block-size", 26, "the pool's block size (on the Kubernetes datastore, a non-default one costs a check by hand more GETs)")
	flag.IntVar(&o.Simulated, "simulated", 5, "nodes that run the DaemonSet's containers")
	flag.DurationVar(&o.Every, "every", 3*time.Second, "gc's period, scaled down from the manifest's")
	flag.IntVar(&o.Periods, "periods", 3, "gc periods measured per phase")
	flag.StringVar(&o.Manifest, "manifest", "deploy/safe-ipam.yaml", "the DaemonSet whose commands run")
	audit := flag.Int("audit", 0, "instead, time `safe-ipam audit --json` of this many allocations and records in Calico's etcd, and its peak RSS")
	detect := flag.Bool("detect", false, "instead, measure one round of `safe-ipam detect` against nodes x pods running pods and their addresses in Calico's datastore: requests, bytes, wall time, peak RSS")
	flag.Parse()
	if err := run(o, *audit, *detect); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(o scale.Options, audit int, detect bool) error {
	dir, err := os.MkdirTemp("", "safe-ipam-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	o.Dir, o.Bin = filepath.Join(dir, "run"), filepath.Join(dir, "bin")
	pkgs := []string{"./plugin/safe-ipam", "./plugin/safe-ipam-etcd", "./plugin/safe-ipam-admin", "./e2e/cmd/calico-ipam", "./e2e/cmd/peakrss"}
	build := gobuild.Build{Out: o.Bin + string(os.PathSeparator), Pkgs: pkgs, Flags: []string{"-ldflags", bench.ReleaseLDFlags}}
	if err := build.Run(context.Background()); err != nil {
		return err
	}
	if audit > 0 {
		return measureAudit(o, audit)
	}
	if detect {
		res, err := scale.MeasureDetect(context.Background(), scale.DetectOptions{Datastore: o.Datastore, Nodes: o.Nodes, Pods: o.Pods,
			BlockSize: o.BlockSize, Bin: o.Bin, Dir: o.Dir, Log: o.Log})
		if err != nil {
			return err
		}
		res.WriteTable(os.Stdout)
		return nil
	}
	res, err := scale.Run(context.Background(), o)
	if err != nil {
		return err
	}
	res.WriteTable(os.Stdout)
	return nil
}

// Issue 32's target for the audit of 1,000,000 allocations and records.
const (
	auditTargetSeconds = 30
	auditTargetKiB     = 1 << 20
)

func measureAudit(o scale.Options, n int) error {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	etcd, err := etcdtest.NewWith(filepath.Join(o.Dir, "etcd"), etcdtest.Options{Fast: true})
	if err != nil {
		return err
	}
	defer etcd.Close()
	start := time.Now()
	cost, err := bench.MeasureAudit(context.Background(), etcd.Client(), etcd.Endpoint(), o.Bin, o.Dir, n)
	if err != nil {
		return err
	}
	verdict := "meets"
	if n == 1_000_000 && (cost.Seconds > auditTargetSeconds || cost.PeakRSSKiB > auditTargetKiB) {
		verdict = "MISSES"
	}
	fmt.Printf("audit: %d allocations, %d records in Calico's etcd (planted and audited in %s): `safe-ipam audit --json` took %.1f s, peak RSS %d MiB, %d findings\n",
		cost.Allocations, cost.Records, time.Since(start).Round(time.Second), cost.Seconds, cost.PeakRSSKiB>>10, cost.Findings)
	if n == 1_000_000 {
		fmt.Printf("%s the target (1,000,000 in under %d s and under 1 GiB)\n", verdict, auditTargetSeconds)
	}
	return nil
}
