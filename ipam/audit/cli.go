package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/record"
)

// Exit codes of audit and repair: admin's, named for what they mean here.
const (
	ExitClean    = admin.ExitOK
	ExitFindings = admin.ExitAttention
	ExitError    = admin.ExitError
)

// cli is one run of audit or repair.
type cli struct {
	cmd    *admin.Command
	calico *admin.Calico
	live   *admin.Liveness
	out    *admin.Output
	repair bool
	apply  bool
	settle time.Duration
	minAge time.Duration
}

func usageText(repair bool) string {
	if repair {
		return `Usage: safe-ipam repair [flags]

Plans (and with --apply makes) only proven fixes: releases leaked and
pod-name-handle addresses whose owner a readable liveness source does not
list, re-claims free addresses that a running record still holds, and
rewrites handle counts from the blocks. Every write is guarded by the
versions it read (etcd: one Txn; Kubernetes: each object's resourceVersion,
in calico-ipam's order). Exit 0: nothing left to do; 1: refusals or unapplied fixes; 2: error.

`
	}
	return `Usage: safe-ipam audit [flags]

Reads Calico's IPAM blocks, handles and affinities (from Calico's etcd, or
with --datastore kubernetes from the Kubernetes API) and safe-ipam's records
(from etcd, or from the node's file store) and reports pod-name handles,
early releases, duplicates, leaks, orphan records and inconsistencies.
Exit 0: clean; 1: findings; 2: error.

`
}

// Run is `safe-ipam audit` (repair false) or `safe-ipam repair`.
func Run(args []string, stdout, stderr io.Writer, repair bool) int {
	name := "audit"
	if repair {
		name = "repair"
	}
	c := &cli{calico: &admin.Calico{}, out: admin.NewOutput(2 * time.Minute), repair: repair}
	c.live = admin.NewLiveness(c.calico)
	c.live.PodsByDefault = true
	c.cmd = admin.NewCommand(name, usageText(repair), stderr, c.calico, c.live, c.out)
	fs := c.cmd.Flags()
	fs.DurationVar(&c.minAge, "min-age", 5*time.Minute, "addresses allocated more recently than this are never judged leaked: their ADD may still run")
	if repair {
		fs.BoolVar(&c.apply, "apply", false, "make the changes (default: dry run, printing what would change)")
		fs.DurationVar(&c.settle, "settle", 10*time.Second, "with --apply: wait this long, read the liveness source again, and act only on what still holds and did not change since the audit")
	}
	if code, stop := c.cmd.ParseOrExit(args); stop {
		return code
	}
	// The snapshot is most of the heap and lives for the whole run; a
	// lower GC target keeps the peak near it at a small CPU cost.
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	ctx, cancel := context.WithTimeout(context.Background(), c.out.Timeout)
	defer cancel()
	code, err := c.run(ctx, stdout)
	if err != nil {
		return c.cmd.Fail(err)
	}
	return code
}

func (c *cli) run(ctx context.Context, stdout io.Writer) (int, error) {
	ds, cli, err := c.calico.OpenDatastore(ctx, 0)
	if err != nil {
		return ExitError, err
	}
	defer ds.Close()
	if cli != nil {
		defer cli.Close()
	}
	recs, closeRecs, err := c.records(ctx, cli)
	if err != nil {
		return ExitError, err
	}
	defer closeRecs()
	snap, err := Load(ctx, ds, recs, c.calico.Network)
	if err != nil {
		return ExitError, err
	}
	live, liveNote, err := c.readLiveness(ctx, snap)
	if err != nil {
		return ExitError, err
	}
	report := NewReport(snap, Analyze(snap, c.options(live)), live)
	report.Warnings = ModeWarnings(snap)
	if live == nil {
		report.Liveness = liveNote
	}
	code := ExitClean
	if !report.Clean() {
		code = ExitFindings
	}
	if c.repair {
		code = c.repairAll(ctx, &Repairer{Data: ds, Records: recs, Snap: snap}, report, live)
	}
	return code, c.out.Print(stdout, report, report.WriteText)
}

func (c *cli) repairAll(ctx context.Context, r *Repairer, report *Report, live *liveness.View) int {
	snap := r.Snap
	report.Repair = true
	report.Actions, report.Refused = Plan(snap, report.Findings, live)
	code := ExitClean
	if len(report.Refused) > 0 || (!c.apply && len(report.Actions) > 0) {
		code = ExitFindings
	}
	if c.apply {
		applied := true
		live = c.settleLiveness(ctx, snap, report, live)
		r.Live = live
		if err := r.Apply(ctx, report.Actions); err != nil {
			applied, code = false, ExitFindings
		}
		report.Applied = &applied
	}
	return code
}

// settleLiveness waits, reads the liveness source again and keeps only
// the actions the fresh view still supports: a pod whose ADD was finishing
// during the audit shows up in the source only once ADD has returned.
// Actions dropped here get an outcome saying so.
func (c *cli) settleLiveness(ctx context.Context, snap *Snapshot, report *Report, live *liveness.View) *liveness.View {
	if c.settle <= 0 || live == nil {
		return live
	}
	select {
	case <-time.After(c.settle):
	case <-ctx.Done():
	}
	fresh, note, err := c.readLiveness(ctx, snap)
	if err == nil && fresh == nil {
		err = errors.New(note)
	}
	still := map[string]bool{}
	if err == nil {
		again, _ := Plan(snap, Analyze(snap, c.options(fresh)), fresh)
		for _, a := range again {
			still[a.Kind+" "+a.Handle+" "+a.Address] = true
		}
	}
	kept := report.Actions[:0]
	for _, a := range report.Actions {
		if still[a.Kind+" "+a.Handle+" "+a.Address] {
			kept = append(kept, a)
		} else {
			a.Outcome = fmt.Sprintf("skipped: the liveness source read again after %s no longer supports it (%v)", c.settle, err)
			report.Refused = append(report.Refused, Refusal{Finding: Finding{Kind: Kind(a.Kind), Handle: a.Handle, Address: a.Address}, Why: a.Outcome})
		}
	}
	report.Actions = kept
	return fresh
}

func (c *cli) options(live *liveness.View) Options {
	var networks []string
	if c.calico.Network != "" {
		networks = []string{c.calico.Network}
	}
	return Options{Networks: networks, Liveness: live, MinAge: c.minAge, SettledFor: c.settle}
}

// readLiveness reads the chosen source. A source that lists nothing
// while records or pod addresses exist on its node is not trusted: a
// wrongly mounted directory looks empty.
func (c *cli) readLiveness(ctx context.Context, snap *Snapshot) (*liveness.View, string, error) {
	live, note, err := c.live.Read(ctx)
	if err != nil || live == nil {
		return nil, note, err
	}
	if n := HeldOn(snap, live); len(live.Attachments) == 0 && n > 0 {
		return nil, fmt.Sprintf("none (%s lists no attachment while %d records and pod addresses exist on its node: not trusted)", live.Source, n), nil
	}
	return live, "", nil
}

// HeldOn counts committed records and pod addresses on the view's node.
func HeldOn(snap *Snapshot, live *liveness.View) int {
	n := 0
	for _, r := range snap.Records {
		if r.State == record.Committed && live.Covers(r.Node) {
			n++
		}
	}
	for i := range snap.Allocations {
		if al := &snap.Allocations[i]; live.Covers(al.Node) && !calicoOwned(al.Handle, al) {
			n++
		}
	}
	return n
}

// records opens where this node's plugin keeps its records: the file
// store, else safe-ipam's etcd store in Calico's etcd (cli), else (with
// the kubernetes datastore) the etcd store --conf's ipam.store names.
func (c *cli) records(ctx context.Context, cli *clientv3.Client) (Records, func(), error) {
	node := c.calico.Node
	switch {
	case c.calico.StoreDir != "":
		return openFileRecords(c.calico.StoreDir, node)
	case cli != nil:
		return &EtcdRecords{Client: cli, Prefix: c.calico.RecordsPrefix}, func() {}, nil
	}
	if c.calico.NodeErr != nil {
		return nil, nil, fmt.Errorf("cannot tell this node's name as Calico does (%v); pass --node", c.calico.NodeErr)
	}
	st, err := opener.Open(ctx, c.calico.File.SafeIPAM, node, opener.Options{Access: opener.ReadOnly, In: c.calico.Conf})
	if err != nil {
		return nil, nil, fmt.Errorf("--conf %s: record store: %w", c.calico.Conf, err)
	}
	return &StoreRecords{Store: st, Of: node, Where: "etcd store of --conf " + c.calico.Conf}, func() { _ = st.Close() }, nil
}

// openFileRecords opens the node's file store for reading. A directory
// that does not exist is an error, not "no records": opening would create
// it, and a wrong path must not read as an empty store.
func openFileRecords(dir, node string) (Records, func(), error) {
	if node == "" {
		return nil, nil, fmt.Errorf("--store-dir %s holds one node's records: --node must name that node", dir)
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, fmt.Errorf("safe-ipam's file store: %w", err)
	}
	cfg := &config.Config{Store: config.Store{Type: config.StoreFile, Dir: dir}}
	st, err := opener.Open(context.Background(), cfg, node, opener.Options{Access: opener.ReadOnly})
	if err != nil {
		return nil, nil, fmt.Errorf("safe-ipam's file store: %w", err)
	}
	return &StoreRecords{Store: st, Of: node, Where: "file store " + dir}, func() { _ = st.Close() }, nil
}
