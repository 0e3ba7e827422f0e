package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Exit codes of audit and repair: admin's, named for what they mean here.
const (
	ExitClean    = admin.ExitOK
	ExitFindings = admin.ExitAttention
	ExitError    = admin.ExitError
)

const usage = `Usage: safe-ipam audit [flags]

Reads Calico's IPAM blocks, handles and affinities (from Calico's etcd, or
with --datastore kubernetes from the Kubernetes API) and safe-ipam's records
(from etcd, or from the node's file store) and reports pod-name handles,
early releases, duplicates, leaks, orphan records and inconsistencies. On
Calico's Kubernetes datastore, with --conf, it compares this node's records
with the cluster-wide AddressClaims too (unclaimed records, orphan claims,
an address another node's claim names).
Exit 0: clean; 1: findings; 2: error.

Example: safe-ipam audit --conf /etc/cni/net.d/10-calico.conflist \
           --cri-endpoint unix:///run/containerd/containerd.sock

`

// Run is `safe-ipam audit`.
func Run(args []string, stdout, stderr io.Writer) int {
	c := NewCLI("audit", usage, stderr)
	if code, stop := c.Cmd.ParseOrExit(args); stop {
		return code
	}
	return c.Run(func(ctx context.Context, e *Examined) (int, error) {
		code := ExitClean
		if !e.Report.Clean() {
			code = ExitFindings
		}
		return code, c.Out.Print(stdout, e.Report, e.Report.WriteText)
	})
}

// CLI is the flags audit and repair share, and one run of the audit's
// reading and judging; repair adds its own flags and acts on what the
// audit found.
type CLI struct {
	Cmd    *admin.Command
	Calico *admin.Datastores
	Live   *admin.Liveness
	Out    *admin.Output
	MinAge time.Duration
	// Settle is repair's wait before it reads the liveness source again;
	// the analysis takes it into account.
	Settle time.Duration
	// Writes opens the record store for writing (repair forgets stale
	// records); the audit only reads.
	Writes bool
}

// NewCLI registers the shared flags of a command named name, and its own
// groups.
func NewCLI(name, usage string, stderr io.Writer, own ...admin.Group) *CLI {
	c := &CLI{Calico: &admin.Datastores{}, Out: admin.NewOutput(2 * time.Minute)}
	c.Live = admin.NewLiveness(c.Calico.Place)
	c.Live.PodsByDefault = true
	c.Cmd = admin.NewCommand(name, usage, stderr, append([]admin.Group{c.Calico, c.Live, c.Out}, own...)...)
	c.Cmd.Flags().DurationVar(&c.MinAge, "min-age", 5*time.Minute, "addresses allocated more recently than this are never judged leaked: their ADD may still run")
	return c
}

// Examined is what one audit read and found; its session (Calico's
// datastore and the records) stays open for repair until the run ends.
type Examined struct {
	*snapshot.Session
	Live   *liveness.View
	Report *Report
}

// auditMemoryLimit is the soft memory limit of an audit or repair run.
// Not lower: a million allocations and records hold about 800 MB at the
// end, and a limit under that made the collector run without pause and
// the heap overrun it anyway (768 MiB: slower, and a higher peak RSS
// than 900 MiB's; docs/performance.md).
const auditMemoryLimit = 900 << 20

// Run reads, judges and hands the result to act, within the command's
// time limit; an error is exit 2.
func (c *CLI) Run(act func(context.Context, *Examined) (int, error)) int {
	if c.MinAge < 0 || c.Settle < 0 {
		return c.Cmd.FailUsage(fmt.Errorf("--min-age %v, --settle %v: want durations of zero or more", c.MinAge, c.Settle))
	}
	// The snapshot is most of the heap and lives for the whole run, so
	// every collection marks all of it again. A soft limit of 900 MiB
	// with the default GC target lets a small audit collect rarely, and
	// a large one (a million allocations and records) stay under 1 GiB;
	// measured in docs/performance.md. An operator's GOMEMLIMIT stands.
	if debug.SetMemoryLimit(-1) == math.MaxInt64 {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(auditMemoryLimit))
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	ctx, cancel := context.WithTimeout(context.Background(), c.Out.Timeout)
	defer cancel()
	code, err := c.examine(ctx, act)
	if err != nil {
		return c.Cmd.Fail(err)
	}
	return code
}

func (c *CLI) examine(ctx context.Context, act func(context.Context, *Examined) (int, error)) (int, error) {
	session, err := snapshot.Open(ctx, c.where())
	if err != nil {
		return ExitError, err
	}
	defer session.Close()
	snap := session.Snap
	live, liveNote, err := c.ReadLiveness(ctx, snap)
	if err != nil {
		return ExitError, err
	}
	findings := Analyze(snap, c.Options(live))
	claimed, claimsNote, err := c.judgeClaims(ctx, snap)
	if err != nil {
		return ExitError, err
	}
	report := NewReport(snap, append(findings, claimed...), live)
	report.Warnings = ModeWarnings(snap)
	if claimsNote != "" {
		report.Warnings = append(report.Warnings, claimsNote)
	}
	if live == nil {
		report.Liveness = liveNote
		if c.Live.Explicit() && liveNote != "" {
			report.Untrusted = liveNote
		}
	}
	return act(ctx, &Examined{Session: session, Live: live, Report: report})
}

// judgeClaims compares this node's records with the cluster-wide claims
// where --conf's config keeps them (Calico's Kubernetes datastore, the
// file store: claims.Kept) and the records read are that store's; where
// the claims are not served, it says so in a warning.
func (c *CLI) judgeClaims(ctx context.Context, snap *snapshot.Snapshot) ([]Finding, string, error) {
	g := c.Calico
	if g.File == nil || g.File.SafeIPAM == nil || !claims.Kept(g.File.SafeIPAM) {
		return nil, "", nil
	}
	cfg := g.File.SafeIPAM
	if g.StoreDir != "" && filepath.Clean(g.StoreDir) != filepath.Clean(cfg.Store.Dir) {
		// repair, which forgets through the same session, then leaves a
		// forgotten record's claims to this node's gc.
		return nil, fmt.Sprintf("--store-dir %s is not --conf's file store %s: the records were not compared with the cluster-wide claims, and a record repair forgets keeps its claims until this node's gc forgets them", g.StoreDir, cfg.Store.Dir), nil
	}
	client := claims.ClientFor(cfg, nil)
	defer client.Close()
	host := record.ThisHost()
	seen, err := ReadClaims(ctx, client, snap.Records, cfg.Network, g.Node, host)
	switch {
	case errors.Is(err, claims.ErrNotServed):
		return nil, errNoClaims.Error(), nil
	case err != nil:
		return nil, "", fmt.Errorf("reading the cluster-wide claims: %w", err)
	}
	return JudgeClaims(snap.Records, seen, host, c.MinAge, time.Now()), "", nil
}

// where is where the flags and --conf say Calico's data and the records
// are.
func (c *CLI) where() snapshot.Where {
	g := c.Calico
	w := snapshot.Where{Calico: g.Settings(), Network: g.Network, Node: g.Node, NodeErr: g.NodeErr,
		StoreDir: g.StoreDir, RecordsPrefix: g.RecordsPrefix, Conf: g.Conf, Writes: c.Writes}
	if g.File != nil {
		w.SafeIPAM = g.File.SafeIPAM
	}
	return w
}

// Options are the analysis options the flags give, with live as the
// liveness view.
func (c *CLI) Options(live *liveness.View) Options {
	var networks []string
	if c.Calico.Network != "" {
		networks = []string{c.Calico.Network}
	}
	return Options{Networks: networks, Liveness: live, MinAge: c.MinAge, SettledFor: c.Settle}
}

// ReadLiveness reads the chosen source. A source that lists nothing
// while records or pod addresses exist on its node is not trusted: a
// wrongly mounted directory looks empty.
func (c *CLI) ReadLiveness(ctx context.Context, snap *snapshot.Snapshot) (*liveness.View, string, error) {
	live, note, err := c.Live.Read(ctx)
	if err != nil || live == nil {
		return nil, note, err
	}
	recs, addrs := HeldOn(snap, live)
	what := fmt.Sprintf("%d records and %d pod addresses", recs, addrs)
	if why := rulebook.TrustEmpty(live.Listing(), live.Node, what, recs+addrs); why != "" {
		return nil, fmt.Sprintf("none (%s: not trusted, nothing judged)", why), nil
	}
	return live, "", nil
}

// HeldOn counts the committed records and the pod addresses on the
// view's node.
func HeldOn(snap *snapshot.Snapshot, live *liveness.View) (records, addrs int) {
	for _, r := range snap.Records {
		if r.State == record.Committed && live.Covers(r.Node) {
			records++
		}
	}
	for _, al := range snap.Allocations.All() {
		if live.Covers(al.Node) && !calicoOwned(al.Handle, al) {
			addrs++
		}
	}
	return records, addrs
}
