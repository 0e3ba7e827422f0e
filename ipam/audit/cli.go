package audit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
	"github.com/safe-ipam/safe-ipam/ipam/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/record"
)

// Exit codes of audit and repair.
const (
	ExitClean    = 0
	ExitFindings = 1
	ExitError    = 2
)

type flags struct {
	conf                     string
	endpoints, cert, key, ca string
	network, recordsPrefix   string
	liveFile, cniCache, node string
	json, apply              bool
	timeout, settle, minAge  time.Duration
	set                      map[string]bool
	nodeErr                  error
}

func parseFlags(cmd string, args []string, stderr io.Writer) (*flags, error) {
	f := &flags{set: map[string]bool{}}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.conf, "conf", "", "the node's CNI config or conflist: learn the network, Calico's etcd endpoints and TLS files, the node name and safe-ipam's records prefix from it (flags given explicitly win)")
	fs.StringVar(&f.endpoints, "etcd-endpoints", "http://127.0.0.1:2379", "comma-separated etcd URLs (Calico's datastore)")
	fs.StringVar(&f.cert, "etcd-cert", "", "etcd client certificate")
	fs.StringVar(&f.key, "etcd-key", "", "etcd client key")
	fs.StringVar(&f.ca, "etcd-ca", "", "etcd CA certificate")
	fs.StringVar(&f.network, "network", "", "only records of this CNI network (default: all); also marks <network>.<id> handles as container-keyed")
	fs.StringVar(&f.recordsPrefix, "records-prefix", config.DefaultEtcdPrefix, "etcd prefix of safe-ipam's records")
	fs.StringVar(&f.liveFile, "live", "", `JSON list of {"containerID","ifname"} known to be running`)
	fs.StringVar(&f.cniCache, "cni-cache", liveness.DefaultCNICache, `libcni result cache, listing the attachments the runtime set up on this node ("" for none)`)
	fs.StringVar(&f.node, "node", "", `the node the liveness source describes ("" with --live: every node) (default: as Calico names this node: --conf's nodename or nodename_file, else `+config.CalicoNodenameFile+`, else the host name)`)
	fs.BoolVar(&f.json, "json", false, "print the report as JSON")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "overall time limit")
	fs.DurationVar(&f.minAge, "min-age", 5*time.Minute, "addresses allocated more recently than this are never judged leaked: their ADD may still run")
	if cmd == "repair" {
		fs.BoolVar(&f.apply, "apply", false, "make the changes (default: dry run, printing what would change)")
		fs.DurationVar(&f.settle, "settle", 10*time.Second, "with --apply: wait this long, read the liveness source again, and act only on what still holds and did not change since the audit")
	}
	fs.Usage = func() { fmt.Fprint(stderr, usageText(cmd)); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := f.applyConf(); err != nil {
		return nil, err
	}
	return f, f.checkNode()
}

// applyConf fills what the operator did not set from the CNI config, and
// the node name as calico-ipam resolves it: a judgment under another name
// than Calico's would be about the wrong node.
func (f *flags) applyConf() error {
	var calico config.Calico
	if f.conf != "" {
		file, err := config.ReadFile(f.conf)
		if err != nil {
			return err
		}
		if ds := file.Calico.Datastore(); ds != config.DatastoreEtcd {
			return fmt.Errorf("--conf %s: Calico's datastore there is %q; audit and repair read Calico's etcd only", f.conf, ds)
		}
		calico = file.Calico
		f.setDefault("etcd-endpoints", &f.endpoints, file.Calico.EtcdEndpoints)
		f.setDefault("etcd-cert", &f.cert, file.Calico.EtcdCertFile)
		f.setDefault("etcd-key", &f.key, file.Calico.EtcdKeyFile)
		f.setDefault("etcd-ca", &f.ca, file.Calico.EtcdCACertFile)
		f.setDefault("network", &f.network, file.Network)
		if s := file.SafeIPAM; s != nil && s.Store.Type == config.StoreEtcd {
			f.setDefault("records-prefix", &f.recordsPrefix, s.Store.Prefix)
		}
	}
	if !f.set["node"] {
		f.node, f.nodeErr = calico.Node()
	}
	return nil
}

func (f *flags) setDefault(name string, dst *string, v string) {
	if !f.set[name] {
		*dst = v
	}
}

// checkNode: a node's CNI cache speaks for that node only, so it needs a
// node name; only a --live file may claim to list every node.
func (f *flags) checkNode() error {
	if f.liveFile != "" && f.set["cni-cache"] && f.cniCache != "" {
		return errors.New("--live and --cni-cache are two liveness sources; give one")
	}
	if f.nodeErr != nil && (f.liveFile != "" || f.cniCache != "") {
		return fmt.Errorf("cannot tell this node's name as Calico does (%v); pass --node", f.nodeErr)
	}
	if f.node == "" && f.liveFile == "" && f.cniCache != "" {
		return errors.New(`--node "" (every node) needs --live; a CNI cache lists one node's attachments`)
	}
	return nil
}

func usageText(cmd string) string {
	if cmd == "repair" {
		return `Usage: safe-ipam repair [flags]

Plans (and with --apply makes) only proven fixes: releases leaked and
pod-name-handle addresses whose owner a readable liveness source does not
list, re-claims free addresses that a running record still holds, and
rewrites handle counts from the blocks. Every write compares the revisions
it read. Exit 0: nothing left to do; 1: refusals or unapplied fixes; 2: error.

`
	}
	return `Usage: safe-ipam audit [flags]

Reads Calico's IPAM blocks, handles and affinities and safe-ipam's records
from etcd and reports pod-name handles, early releases, duplicates, leaks,
orphan records and inconsistencies. Exit 0: clean; 1: findings; 2: error.

`
}

// Run is `safe-ipam audit` (repair false) or `safe-ipam repair`.
func Run(args []string, stdout, stderr io.Writer, repair bool) int {
	cmd := "audit"
	if repair {
		cmd = "repair"
	}
	f, err := parseFlags(cmd, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitClean
	}
	if err != nil {
		fmt.Fprintf(stderr, "safe-ipam %s: %v\n", cmd, err)
		return ExitError
	}
	// The snapshot is most of the heap and lives for the whole run; a
	// lower GC target keeps the peak near it at a small CPU cost.
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	code, err := run(ctx, f, repair, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "safe-ipam %s: %v\n", cmd, err)
		return ExitError
	}
	return code
}

func run(ctx context.Context, f *flags, repair bool, stdout io.Writer) (int, error) {
	cli, err := f.client(ctx)
	if err != nil {
		return ExitError, err
	}
	defer cli.Close()
	snap, err := Load(ctx, cli, strings.TrimRight(f.recordsPrefix, "/"), f.network)
	if err != nil {
		return ExitError, err
	}
	live, liveNote, err := f.readLiveness(ctx, snap)
	if err != nil {
		return ExitError, err
	}
	findings := Analyze(snap, f.options(live))
	report := NewReport(snap, findings, live)
	report.Warnings = ModeWarnings(snap)
	if live == nil {
		report.Liveness = liveNote
	}
	code := ExitClean
	if !report.Clean() {
		code = ExitFindings
	}
	if repair {
		code = f.repair(ctx, cli, snap, report, live)
	}
	if f.json {
		return code, report.WriteJSON(stdout)
	}
	return code, report.WriteText(stdout)
}

func (f *flags) repair(ctx context.Context, cli *clientv3.Client, snap *Snapshot, report *Report, live *liveness.View) int {
	report.Repair = true
	report.Actions, report.Refused = Plan(snap, report.Findings, live)
	code := ExitClean
	if len(report.Refused) > 0 || (!f.apply && len(report.Actions) > 0) {
		code = ExitFindings
	}
	if f.apply {
		applied := true
		live = f.settleLiveness(ctx, snap, report, live)
		r := &Repairer{Client: cli, Snap: snap, Live: live, RecordsPrefix: strings.TrimRight(f.recordsPrefix, "/")}
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
func (f *flags) settleLiveness(ctx context.Context, snap *Snapshot, report *Report, live *liveness.View) *liveness.View {
	if f.settle <= 0 || live == nil {
		return live
	}
	select {
	case <-time.After(f.settle):
	case <-ctx.Done():
	}
	fresh, note, err := f.readLiveness(ctx, snap)
	if err == nil && fresh == nil {
		err = errors.New(note)
	}
	still := map[string]bool{}
	if err == nil {
		again, _ := Plan(snap, Analyze(snap, f.options(fresh)), fresh)
		for _, a := range again {
			still[a.Kind+" "+a.Handle+" "+a.Address] = true
		}
	}
	kept := report.Actions[:0]
	for _, a := range report.Actions {
		if still[a.Kind+" "+a.Handle+" "+a.Address] {
			kept = append(kept, a)
		} else {
			a.Outcome = fmt.Sprintf("skipped: the liveness source read again after %s no longer supports it (%v)", f.settle, err)
			report.Refused = append(report.Refused, Refusal{Finding: Finding{Kind: Kind(a.Kind), Handle: a.Handle, Address: a.Address}, Why: a.Outcome})
		}
	}
	report.Actions = kept
	return fresh
}

func (f *flags) options(live *liveness.View) Options {
	return Options{Networks: nonEmpty(f.network), Liveness: live, MinAge: f.minAge, SettledFor: f.settle}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// client connects to Calico's etcd; a TLS fault names the file and the
// flag (or --conf key) that gave it.
func (f *flags) client(ctx context.Context) (*clientv3.Client, error) {
	files := etcdconn.TLSFiles{
		Cert: etcdconn.File{Path: f.cert, Setting: f.setting("etcd-cert", "etcd_cert_file")},
		Key:  etcdconn.File{Path: f.key, Setting: f.setting("etcd-key", "etcd_key_file")},
		CA:   etcdconn.File{Path: f.ca, Setting: f.setting("etcd-ca", "etcd_ca_cert_file")},
	}
	return etcdconn.Connect(ctx, etcdconn.Config{Endpoints: strings.Split(f.endpoints, ","), TLS: files, DialTimeout: 5 * time.Second})
}

// setting names where a value came from: the flag, or the --conf key.
func (f *flags) setting(flagName, confKey string) string {
	if f.conf != "" && !f.set[flagName] {
		return confKey + " in " + f.conf
	}
	return "--" + flagName
}

// readLiveness reads the chosen source. One the operator named explicitly
// must be readable; the default cache may be absent (no liveness then).
// A source that lists nothing while records of its node exist is not
// trusted: a wrongly mounted directory looks empty.
func (f *flags) readLiveness(ctx context.Context, snap *Snapshot) (*liveness.View, string, error) {
	var live *liveness.View
	var err error
	if f.liveFile == "" && f.cniCache == "" {
		return nil, "none", nil
	}
	if f.liveFile != "" {
		live, err = liveness.File{Path: f.liveFile, Node: f.node}.Read(ctx)
	} else {
		live, err = liveness.CNICache{Dir: f.cniCache, Node: f.node}.Read(ctx)
	}
	if err != nil {
		if f.liveFile != "" || f.set["cni-cache"] {
			return nil, "", err
		}
		return nil, fmt.Sprintf("none (%v)", err), nil
	}
	if n := heldOn(snap, live); len(live.Attachments) == 0 && n > 0 {
		return nil, fmt.Sprintf("none (%s lists no attachment while %d records and pod addresses exist on its node: not trusted)", live.Source, n), nil
	}
	return live, "", nil
}

// heldOn counts committed records and pod addresses on the source's node.
func heldOn(snap *Snapshot, live *liveness.View) int {
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
