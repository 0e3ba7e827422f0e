// Command bench is `make bench`: safe-ipam's cost on top of calico-ipam,
// measured side by side in one run. See package bench.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/safe-ipam/safe-ipam/e2e/bench"
)

func main() {
	opts := bench.Options{Log: os.Stderr, CalicoIPAM: os.Getenv("CALICO_IPAM")}
	out := flag.String("out", "bin/bench.json", "where to write the full results")
	flag.IntVar(&opts.Samples, "samples", 200, "ADD+DEL pairs per configuration")
	flag.IntVar(&opts.TraceSamples, "trace-samples", 50, "traced ADD+DEL pairs per store for the breakdown")
	flag.IntVar(&opts.VersionRuns, "version-runs", 300, "VERSION execs per binary")
	flag.IntVar(&opts.ChurnOps, "churn", 384, "ADD+DEL cycles per churn level")
	flag.IntVar(&opts.AuditAllocs, "audit", 100000, "allocations for the audit measurement (0 skips)")
	flag.Parse()
	res, err := bench.Run(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	res.WriteTable(os.Stdout)
	if err := res.WriteJSON(*out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
