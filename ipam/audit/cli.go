package audit

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
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
early releases, duplicates, leaks, orphan records and inconsistencies.
Exit 0: clean; 1: findings; 2: error.

Example: safe-ipam audit --conf /etc/cni/net.d/10-calico.conflist \
           --cri-endpoint unix:///run/containerd/containerd.sock

`

// Run is `safe-ipam audit`.
func Run(args []string, stdout, stderr io.Writer) int {
	s := NewSession("audit", usage, stderr)
	if code, stop := s.Cmd.ParseOrExit(args); stop {
		return code
	}
	return s.Run(func(ctx context.Context, e *Examined) (int, error) {
		code := ExitClean
		if !e.Report.Clean() {
			code = ExitFindings
		}
		return code, s.Out.Print(stdout, e.Report, e.Report.WriteText)
	})
}

// Session is one run of the audit's reading and judging, with the flags
// audit and repair share; repair adds its own flags and acts on what the
// audit found.
type Session struct {
	Cmd    *admin.Command
	Calico *admin.Calico
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

// NewSession registers the shared flags of a command named name.
func NewSession(name, usage string, stderr io.Writer) *Session {
	s := &Session{Calico: &admin.Calico{}, Out: admin.NewOutput(2 * time.Minute)}
	s.Live = admin.NewLiveness(s.Calico.Place)
	s.Live.PodsByDefault = true
	s.Cmd = admin.NewCommand(name, usage, stderr, s.Calico, s.Live, s.Out)
	s.Cmd.Flags().DurationVar(&s.MinAge, "min-age", 5*time.Minute, "addresses allocated more recently than this are never judged leaked: their ADD may still run")
	return s
}

// Examined is what one audit read and found; its datastore and records
// stay open for repair until the session ends.
type Examined struct {
	Data    datastore.Datastore
	Records snapshot.Records
	Snap    *snapshot.Snapshot
	Live    *liveness.View
	Report  *Report
}

// Run reads, judges and hands the result to act, within the command's
// time limit; an error is exit 2.
func (s *Session) Run(act func(context.Context, *Examined) (int, error)) int {
	// The snapshot is most of the heap and lives for the whole run; a
	// lower GC target keeps the peak near it at a small CPU cost.
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	ctx, cancel := context.WithTimeout(context.Background(), s.Out.Timeout)
	defer cancel()
	code, err := s.examine(ctx, act)
	if err != nil {
		return s.Cmd.Fail(err)
	}
	return code
}

func (s *Session) examine(ctx context.Context, act func(context.Context, *Examined) (int, error)) (int, error) {
	ds, cli, err := datastore.Open(ctx, s.Calico.Settings())
	if err != nil {
		return ExitError, err
	}
	defer ds.Close()
	if cli != nil {
		defer cli.Close()
	}
	recs, closeRecs, err := s.records(ctx, cli)
	if err != nil {
		return ExitError, err
	}
	defer closeRecs()
	snap, err := snapshot.Load(ctx, ds, recs, s.Calico.Network)
	if err != nil {
		return ExitError, err
	}
	live, liveNote, err := s.ReadLiveness(ctx, snap)
	if err != nil {
		return ExitError, err
	}
	report := NewReport(snap, Analyze(snap, s.Options(live)), live)
	report.Warnings = ModeWarnings(snap)
	if live == nil {
		report.Liveness = liveNote
		if s.Live.Explicit() && liveNote != "" {
			report.Untrusted = liveNote
		}
	}
	return act(ctx, &Examined{Data: ds, Records: recs, Snap: snap, Live: live, Report: report})
}

// Options are the analysis options the flags give, with live as the
// liveness view.
func (s *Session) Options(live *liveness.View) Options {
	var networks []string
	if s.Calico.Network != "" {
		networks = []string{s.Calico.Network}
	}
	return Options{Networks: networks, Liveness: live, MinAge: s.MinAge, SettledFor: s.Settle}
}

// ReadLiveness reads the chosen source. A source that lists nothing
// while records or pod addresses exist on its node is not trusted: a
// wrongly mounted directory looks empty.
func (s *Session) ReadLiveness(ctx context.Context, snap *snapshot.Snapshot) (*liveness.View, string, error) {
	live, note, err := s.Live.Read(ctx)
	if err != nil || live == nil {
		return nil, note, err
	}
	if recs, addrs := HeldOn(snap, live); len(live.Attachments) == 0 && recs+addrs > 0 {
		return nil, fmt.Sprintf("none (%s lists no attachment while %d records and %d pod addresses exist on its node: not trusted, nothing judged)", live.Source, recs, addrs), nil
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
	for i := range snap.Allocations {
		if al := &snap.Allocations[i]; live.Covers(al.Node) && !calicoOwned(al.Handle, al) {
			addrs++
		}
	}
	return records, addrs
}

// records opens where this node's plugin keeps its records: the file
// store, else safe-ipam's etcd store in Calico's etcd (cli), else (with
// the kubernetes datastore) the etcd store --conf's ipam.store names.
func (s *Session) records(ctx context.Context, cli *clientv3.Client) (snapshot.Records, func(), error) {
	node := s.Calico.Node
	switch {
	case s.Calico.StoreDir != "":
		return openFileRecords(s.Calico.StoreDir, node, s.access())
	case cli != nil:
		return &snapshot.EtcdRecords{Client: cli, Prefix: s.Calico.RecordsPrefix}, func() {}, nil
	}
	if s.Calico.NodeErr != nil {
		return nil, nil, fmt.Errorf("cannot tell this node's name as Calico does (%v); pass --node", s.Calico.NodeErr)
	}
	st, err := opener.Open(ctx, s.Calico.File.SafeIPAM, node, opener.Options{Access: s.access(), In: s.Calico.Conf})
	if err != nil {
		return nil, nil, fmt.Errorf("--conf %s: record store: %w", s.Calico.Conf, err)
	}
	return &snapshot.StoreRecords{Store: st, Of: node, Where: "etcd store of --conf " + s.Calico.Conf}, func() { _ = st.Close() }, nil
}

func (s *Session) access() opener.Access {
	if s.Writes {
		return opener.ReadWrite
	}
	return opener.ReadOnly
}

// openFileRecords opens the node's file store. A directory that does not
// exist is an error, not "no records": a wrong path must not read as an
// empty store.
func openFileRecords(dir, node string, access opener.Access) (snapshot.Records, func(), error) {
	if node == "" {
		return nil, nil, fmt.Errorf("--store-dir %s holds one node's records: --node must name that node", dir)
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, fmt.Errorf("safe-ipam's file store: %w", err)
	}
	cfg := &config.Config{Store: config.Store{Type: config.StoreFile, Dir: dir}}
	st, err := opener.Open(context.Background(), cfg, node, opener.Options{Access: access})
	if err != nil {
		return nil, nil, fmt.Errorf("safe-ipam's file store: %w", err)
	}
	return &snapshot.StoreRecords{Store: st, Of: node, Where: "file store " + dir}, func() { _ = st.Close() }, nil
}
