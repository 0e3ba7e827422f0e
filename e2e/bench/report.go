package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints a readable table and the one-line summary.
func (res *Results) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "machine: %s; delegate: %s\n\n", res.Machine, res.Delegate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "config\top\tp50 ms\tp95 ms\tp99 ms\tn\tp50 vs alone\t")
	for _, l := range res.Latency {
		ratio := "-"
		if l.Config != Alone {
			ratio = fmt.Sprintf("x%.2f", res.Ratios[fmt.Sprintf("%s %s p50", l.Config, l.Op)])
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%d\t%s\t\n", l.Config, l.Op, l.P50, l.P95, l.P99, l.N, ratio)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nexec: safe-ipam VERSION p50 %.2f ms, host-local VERSION p50 %.2f ms (x%.2f)\n",
		res.Exec.SafeIPAMVersionP50, res.Exec.HostLocalVersionP50, res.Exec.Ratio)
	rt := res.RoundTrips
	fmt.Fprintf(w, "etcd round trips per op: calico-ipam alone ADD %.1f DEL %.1f; safe-ipam's own ADD %.1f DEL %.1f\n",
		rt.DelegateAdd, rt.DelegateDel, rt.SafeIPAMAdd, rt.SafeIPAMDel)
	fmt.Fprintf(w, "peak RSS of one ADD: %d KiB with calico-ipam as delegate (the larger process), %d KiB safe-ipam's own (etcd store)\n\n", res.PeakRSSKiB, res.OwnRSSKiB)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "churn config\tworkers\tops\tops/s\terrors\tleaked\tduplicated\tinconsistent\t")
	for _, c := range res.Churn {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%d\t%d\t%d\t%d\t\n", c.Config, c.Workers, c.Ops, c.OpsPerSec, c.Errors, c.Leaked, c.Duplicated, c.Inconsistent)
	}
	tw.Flush()
	if a := res.Audit; a != nil {
		fmt.Fprintf(w, "\naudit: %d allocations, %d records in %.2f s, peak RSS %d KiB, %d findings\n", a.Allocations, a.Records, a.Seconds, a.PeakRSSKiB, a.Findings)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, res.Line())
}

// Line is the summary the Makefile target ends with.
func (res *Results) Line() string {
	ratio := func(config, op string) float64 { return res.Ratios[fmt.Sprintf("%s %s p50", config, op)] }
	churn := res.churn(File, 32)
	return fmt.Sprintf("bench: add x%.2f del x%.2f (file store), add x%.2f del x%.2f (etcd store), exec x%.2f vs host-local, etcd round trips add %.0f del %.0f, churn32 %.0f/s %d errors",
		ratio(File, "ADD"), ratio(File, "DEL"), ratio(Etcd, "ADD"), ratio(Etcd, "DEL"), res.Exec.Ratio,
		res.RoundTrips.SafeIPAMAdd, res.RoundTrips.SafeIPAMDel, churn.OpsPerSec, churn.Errors+churn.Leaked+churn.Duplicated+churn.Inconsistent)
}

func (res *Results) churn(config string, workers int) Churn {
	for _, c := range res.Churn {
		if c.Config == config && c.Workers == workers {
			return c
		}
	}
	return Churn{}
}
