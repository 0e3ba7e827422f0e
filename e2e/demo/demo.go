// Package demo runs the StatefulSet late-DEL story twice, with calico-ipam
// alone and with safe-ipam in front, on real network namespaces, and
// prints what each run observed side by side.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/statefulset"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// netnsPrefix marks the demo's namespaces. Both runs use the same names,
// one after the other, so their sandboxes get the same container IDs.
const netnsPrefix = "sipdemo-"

// Options configure a demo run.
type Options struct {
	// BinDir holds prebuilt binaries; empty builds them (needs the Go
	// toolchain and the safe-ipam source tree).
	BinDir string
	// Out receives the table and the final line.
	Out io.Writer
}

// Outcome is what the demo observed.
type Outcome struct {
	Without, With *statefulset.Report
}

// ErrNotDemonstrated means the runs did not show what the demo claims:
// the control had no duplicate, or safe-ipam had one or leaked.
var ErrNotDemonstrated = errors.New("the demo did not show what it claims")

// Run checks the host, runs both stories and prints the comparison. It
// removes every netns, temp directory and etcd it made, also on error.
func Run(ctx context.Context, opt Options) (*Outcome, error) {
	if err := testbed.CheckHost(ctx); err != nil {
		return nil, err
	}
	restoreForward, err := testbed.PreserveIPForward()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := restoreForward(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		}
	}()
	work, err := os.MkdirTemp("", "safe-ipam-demo-")
	if err != nil {
		return nil, fmt.Errorf("creating a work directory: %w", err)
	}
	defer os.RemoveAll(work)
	bin, err := binaries(ctx, opt.BinDir, filepath.Join(work, "bin"))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(opt.Out, "safe-ipam demo: %s is replaced (sandbox A, then B), A's CNI DEL arrives late,\n", statefulset.Pod)
	fmt.Fprintf(opt.Out, "then %d other pods start. One node, Calico 2.x handles, /%d blocks, real netns via cnitool.\n\n", testbed.BlockAddrs, testbed.BlockSize)
	out := &Outcome{}
	if out.Without, err = runOnce(ctx, bin, filepath.Join(work, "without"), false); err != nil {
		return out, err
	}
	if out.With, err = runOnce(ctx, bin, filepath.Join(work, "with"), true); err != nil {
		return out, err
	}
	if err := printComparison(opt.Out, out); err != nil {
		return out, err
	}
	return out, out.verdict(opt.Out)
}

func binaries(ctx context.Context, binDir, buildDir string) (testbed.Binaries, error) {
	if binDir != "" {
		return testbed.Use(binDir)
	}
	if err := os.MkdirAll(buildDir, 0o755); err != nil {
		return testbed.Binaries{}, err
	}
	b, err := testbed.Build(ctx, buildDir, "")
	if err != nil {
		return b, fmt.Errorf("building binaries (run from the safe-ipam source tree, or pass -bin): %w", err)
	}
	return b, nil
}

// runOnce plays the story on a fresh etcd and removes what it made.
func runOnce(ctx context.Context, bin testbed.Binaries, dir string, safe bool) (*statefulset.Report, error) {
	set := testbed.NewNetnsSet(netnsPrefix)
	if err := set.RemoveLeftovers(ctx); err != nil {
		return nil, fmt.Errorf("removing netns left by an earlier demo: %w", err)
	}
	srv, err := etcdtest.New(filepath.Join(dir, "etcd"))
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	defer func() {
		// Clean up even when ctx was cancelled by Ctrl-C.
		cleanup, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := set.RemoveAll(cleanup); err != nil {
			fmt.Fprintf(os.Stderr, "demo: cleaning up netns: %v\n", err)
		}
	}()
	c := &testbed.Cluster{Bin: bin, Etcd: srv.Client(), EtcdEndpoint: srv.Endpoint(), Dir: dir, Netns: set}
	return statefulset.Run(ctx, c, statefulset.Options{Safe: safe})
}

// printComparison writes the side-by-side table: the two incarnations of
// web-0 and every pod that shares an address in either run.
func printComparison(w io.Writer, o *Outcome) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "POD\tCONTAINER\tWITHOUT SAFE-IPAM\tALSO HELD BY\tWITH SAFE-IPAM\tALSO HELD BY\n")
	hidden := 0
	for i, without := range o.Without.Rows {
		if i >= len(o.With.Rows) {
			break
		}
		with := o.With.Rows[i]
		if i > 1 && len(without.AlsoHeldBy) == 0 && len(with.AlsoHeldBy) == 0 {
			hidden++
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", without.Sandbox.Pod, container(without),
			address(without), holders(without), address(with), holders(with))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if hidden > 0 {
		fmt.Fprintf(w, "(%d more pods hold an address of their own in both runs)\n", hidden)
	}
	fmt.Fprintf(w, "\nRight after A's late DEL, Calico's data in etcd had B's %s %s without safe-ipam\n", o.Without.NewAddr, freedOrHeld(o.Without.NewFreedByLateDel))
	fmt.Fprintf(w, "and B's %s %s with safe-ipam. A's own address: %s without, %s with.\n\n", o.With.NewAddr, freedOrHeld(o.With.NewFreedByLateDel),
		releasedOrNot(o.Without.OldReleasedByLateDel), releasedOrNot(o.With.OldReleasedByLateDel))
	return nil
}

func container(r statefulset.Row) string {
	id := r.Sandbox.ShortID()
	switch r.Role {
	case "old sandbox, late DEL":
		return id + " (A, late DEL)"
	case "new sandbox, running":
		return id + " (B)"
	}
	return id
}

func address(r statefulset.Row) string {
	if !r.Addr.IsValid() {
		return "-"
	}
	if r.CalicoHandle == "" {
		return r.Addr.String() + " (free in Calico)"
	}
	return r.Addr.String()
}

func holders(r statefulset.Row) string {
	if len(r.AlsoHeldBy) == 0 {
		return "-"
	}
	var who []string
	for _, sb := range r.AlsoHeldBy {
		who = append(who, sb.Pod.String())
	}
	return strings.Join(who, ", ") + "  <- duplicate"
}

func freedOrHeld(freed bool) string {
	if freed {
		return "FREE"
	}
	return "still allocated"
}

func releasedOrNot(released bool) string {
	if released {
		return "released"
	}
	return "NOT released"
}

// verdict prints the final line and says whether the runs demonstrated
// the claim.
func (o *Outcome) verdict(w io.Writer) error {
	without, with := len(o.Without.Duplicates), len(o.With.Duplicates)
	var problems []string
	if without == 0 {
		problems = append(problems, "calico-ipam alone produced no duplicate address, so the failure did not reproduce")
	}
	if with > 0 {
		problems = append(problems, "safe-ipam let an address be held twice: "+describe(o.With.Duplicates))
	}
	if len(o.With.Leaks) > 0 {
		problems = append(problems, "with safe-ipam, still held after every DEL: "+strings.Join(o.With.Leaks, "; "))
	}
	for _, p := range problems {
		fmt.Fprintf(w, "demo: %s\n", p)
	}
	fmt.Fprintf(w, "demo: without safe-ipam %d duplicate address(es); with safe-ipam %d\n", without, with)
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrNotDemonstrated, strings.Join(problems, "; "))
	}
	return nil
}

func describe(dups map[netip.Addr][]testbed.Sandbox) string { return testbed.DescribeDuplicates(dups) }
