// Command scale is `make scale`: what safe-ipam's periodic work costs
// Calico's datastore, measured on a real etcd or kube-apiserver with
// several simulated nodes and extrapolated to 1,000 and 5,000 nodes. See
// package scale.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

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
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(o scale.Options) error {
	dir, err := os.MkdirTemp("", "safe-ipam-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	o.Dir, o.Bin = filepath.Join(dir, "run"), filepath.Join(dir, "bin")
	build := gobuild.Build{Out: o.Bin + string(os.PathSeparator), Pkgs: []string{"./plugin/safe-ipam", "./plugin/safe-ipam-admin", "./e2e/cmd/calico-ipam"}}
	if err := build.Run(context.Background()); err != nil {
		return err
	}
	res, err := scale.Run(context.Background(), o)
	if err != nil {
		return err
	}
	res.WriteTable(os.Stdout)
	return nil
}
