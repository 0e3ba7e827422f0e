package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// Exit codes of install and uninstall: admin's, named for what they mean
// here (1: the node's state refused it, nothing changed).
const (
	ExitOK      = admin.ExitOK
	ExitRefused = admin.ExitAttention
	ExitError   = admin.ExitError
)

type cliFlags struct {
	node          Node
	mode          string
	dryRun, watch bool
	// releaseQuarantines: uninstall releases the quarantines of running
	// holders instead of re-claiming them.
	releaseQuarantines bool
	// formerHosts: uninstall forgets the records these hosts wrote too.
	formerHosts []string
	out         *admin.Output
	settle      time.Duration
	metrics     admin.MetricsAddr
	// fullCheckEvery is the watch's period of full checks.
	fullCheckEvery time.Duration
	// handles, store and logFile are node settings; "" leaves them.
	handles, store, logFile string
	// outside is the node setting delegateOutsideCNIPath; nil leaves it.
	outside *bool
}

// settings are the node settings the flags give, nil for none.
func (f *cliFlags) settings() (Settings, error) {
	s := Settings{}
	switch f.handles {
	case "":
	case config.HandlesContainer, config.HandlesPod:
		s["delegateHandles"] = f.handles
	default:
		return nil, fmt.Errorf("--delegate-handles %q: %q or %q", f.handles, config.HandlesContainer, config.HandlesPod)
	}
	switch f.store {
	case "":
	case config.StoreFile, config.StoreEtcd:
		s["store"] = map[string]string{"type": f.store}
	default:
		return nil, fmt.Errorf("--store %q: %q or %q", f.store, config.StoreFile, config.StoreEtcd)
	}
	if f.logFile != "" {
		if f.logFile != "-" && !filepath.IsAbs(f.logFile) {
			return nil, fmt.Errorf("--log-file %q: an absolute path, or - for stderr only", f.logFile)
		}
		s["logFile"] = strings.TrimPrefix(f.logFile, "-")
	}
	if f.outside != nil {
		s["delegateOutsideCNIPath"] = *f.outside
	}
	if len(s) == 0 {
		return nil, nil
	}
	return s, nil
}

// parseCLI parses install's or uninstall's flags; stop says the command
// ends with code (after -h, or a bad flag already reported).
func parseCLI(name string, args []string, stderr io.Writer) (f *cliFlags, code int, stop bool) {
	f = &cliFlags{out: admin.NewOutput(0)}
	dirs := &admin.NodeDirs{}
	groups := []admin.Group{dirs, f.out}
	if name == "install" {
		groups = append(groups, &f.metrics)
	}
	cmd := admin.NewCommand(name, cliUsage[name], stderr, groups...)
	fs := cmd.Flags()
	fs.BoolVar(&f.dryRun, "dry-run", false, "print what would change and change nothing")
	if name == "install" {
		fs.StringVar(&f.mode, "mode", ModeTakeover, `"takeover": safe-ipam becomes calico-ipam, network configs untouched; "conflist": Calico's network configs name safe-ipam as their IPAM; "own-conflist": safe-ipam writes `+cninode.OwnConflist+`, Calico's config with its IPAM through safe-ipam, which the runtime reads first (Calico's files untouched: a calico-node restart undoes nothing)`)
		fs.BoolVar(&f.watch, "watch", false, "stay running and re-install whenever calico-node's installer (or anything) undoes it")
		fs.DurationVar(&f.settle, "settle", DefaultSettle, "with --watch: quiet time after a change before re-installing")
		fs.DurationVar(&f.fullCheckEvery, "full-check-every", RemoteCheckEvery, "with --watch and --metrics-addr: the mean period (jittered ±20%) of the full check, which reads the record store and Calico's datastore; the node's own files are checked every "+CheckEvery.String())
		fs.StringVar(&f.handles, "delegate-handles", "", `node setting: "container", or "pod" for a calico-ipam that keys ADD by namespace.podname as Calico 2.x did (unchanged when not given)`)
		fs.StringVar(&f.store, "store", "", `node setting: where records live, "file" or "etcd" (Calico's etcd: its endpoints and TLS files from Calico's keys in the config); default as the plugin infers it`)
		fs.StringVar(&f.logFile, "log-file", "", `node setting: the plugin's log file (absolute), or "-" for stderr only`)
		fs.BoolFunc("delegate-outside-cni-path", "node setting: let a network config's ipam.delegate.binDir or absolute ipam.delegate.binary name a file outside CNI_PATH (=false takes it back; unchanged when not given). Only the node decides what runs as root: no network config can", func(v string) error {
			b, err := strconv.ParseBool(v)
			f.outside = &b
			return err
		})
	} else {
		fs.StringVar(&f.mode, "mode", "", `undo only this mode ("own-conflist", "conflist" or "takeover"; default: each, in that order)`)
		fs.Func("former-host", "also forget the records host `NAME` wrote under this node's Calico name, a host name this machine had before (a host rename; the etcd store); repeatable", func(v string) error {
			if v == "" {
				return errors.New("a host name, not empty")
			}
			f.formerHosts = append(f.formerHosts, v)
			return nil
		})
		fs.BoolVar(&f.releaseQuarantines, "release-quarantines", false, "release the allocations quarantined with running holders through calico-ipam instead of re-claiming them for the holders: their addresses become free in Calico while the holders use them (the output names the holders to restart)")
	}
	if code, stop := cmd.ParseOrExit(args); stop {
		return nil, code, true
	}
	f.node = Node{BinDir: dirs.BinDir, ConfDir: dirs.ConfDir, ReloadWait: DefaultReloadWait}
	if f.watch && f.dryRun {
		return nil, cmd.FailUsage(errors.New("--watch and --dry-run exclude each other")), true
	}
	if f.metrics.Addr != "" && !f.watch {
		return nil, cmd.FailUsage(errors.New("--metrics-addr needs --watch: only the watch keeps running")), true
	}
	if name == "install" && f.fullCheckEvery <= 0 {
		return nil, cmd.FailUsage(errors.New("--full-check-every must be positive")), true
	}
	return f, 0, false
}

var cliUsage = map[string]string{
	"install": `Usage: safe-ipam install [flags]

Puts safe-ipam in front of Calico's calico-ipam on this node: all or
nothing, and idempotent. It makes its changes unless --dry-run is given.
Exit 0 when installed, 1 when refused (nothing changed; the message says
why), 2 on a usage error. It refuses a node where the plugin, with the
node settings given, would refuse a network config it runs for (checked
with the plugin's own parser). --store=etcd takes Calico's etcd
(etcd_endpoints and the etcd_*_file keys of Calico's config), and is
refused where Calico names none.

The node settings (--delegate-handles, --store, --log-file,
--delegate-outside-cni-path) go to
<cni-bin-dir>/.safe-ipam.json, which calico-node never rewrites; the
plugin takes each one its network config leaves out. Uninstall removes
the file.

On a node where Calico's config is the first the runtime reads,
--mode=own-conflist leaves every file of Calico's as it is: safe-ipam's
own config sorts first. With --watch it renders it again when Calico's
changes, and removes it when Calico's goes.

Example: safe-ipam install --mode=takeover --delegate-handles=pod --dry-run

`,
	"uninstall": `Usage: safe-ipam uninstall [flags]

Takes safe-ipam off this node, restoring byte for byte what install
replaced, unless it changed since, then forgets this node's records (with
their address index entries and quarantines; Calico's allocations stay):
no DEL or GC of safe-ipam comes for them any more. A record an ADD or
DEL begun before the files came back may still write is waited for (up
to ipam.verbTimeout and 5 seconds). An allocation
quarantined with a record whose pod runs holds that pod's address: it is
re-claimed for the pod in Calico's datastore (the address goes back under
the pod's own handle), or, where that cannot be written, kept and the pod
named to restart; --release-quarantines releases them instead. In the
etcd store, records another host wrote under this node's Calico name (a
stale nodename) stay, that machine's; --former-host NAME names a host
name this machine had before a rename, whose records are its own. It refuses
while a watch (install --watch) keeps safe-ipam on the node, and while a
network config it has no original of names safe-ipam (calico-node renders
it from the calico-config patch: revert that first, as the message says).
A run that cannot forget every record (the store does not answer) leaves
<cni-bin-dir>/.safe-ipam-uninstall.json, doctor reports the node half
uninstalled, and the next run finishes the forget. Exit codes as
install's; 2 when the record store does not answer, or a CNI call of
safe-ipam outlived the wait (run it again).

Example: safe-ipam uninstall --dry-run

`,
}

// RunInstall is `safe-ipam install`. check is what the watch's metrics
// report of the node (safe-ipam doctor, which the admin binary wires in:
// doctor reads what install writes, so install does not import it).
func RunInstall(args []string, stdout, stderr io.Writer, check NodeCheck) int {
	f, code, stop := parseCLI("install", args, stderr)
	if stop {
		return code
	}
	mode, err := ModeNamed(f.mode)
	if err != nil {
		fmt.Fprintln(stderr, "safe-ipam install:", err)
		return ExitError
	}
	self, err := cniBinary()
	if err != nil {
		fmt.Fprintln(stderr, "safe-ipam install:", err)
		return ExitError
	}
	settings, err := f.settings()
	if err != nil {
		fmt.Fprintln(stderr, "safe-ipam install:", err)
		return ExitError
	}
	if f.watch {
		return runWatch(f, mode, self, settings, stderr, check)
	}
	// An install run once may switch a takeover node; a watch never does
	// (it would fight a switch made by hand).
	switch mode.(type) {
	case ConflistMode:
		mode = ConflistMode{SwitchFromTakeover: true}
	case OwnConflistMode:
		mode = OwnConflistMode{SwitchFromTakeover: true}
	}
	r, err := InstallWith(f.node, mode, self, settings, f.dryRun)
	code = report("install", f, r, err, stdout, stderr)
	if code == ExitOK && !f.dryRun {
		w := stdout
		if f.out.JSON {
			w = stderr // stdout is the JSON report
		}
		reindex(f.node, w, stderr)
	}
	return code
}

// RunUninstall is `safe-ipam uninstall`.
func RunUninstall(args []string, stdout, stderr io.Writer) int {
	f, code, stop := parseCLI("uninstall", args, stderr)
	if stop {
		return code
	}
	names := ModeNames
	if f.mode != "" {
		names = []string{f.mode}
	}
	records := recordsOf(f.node)
	if err := records.resume(); err != nil {
		fmt.Fprintln(stderr, "safe-ipam uninstall:", err)
		return ExitError
	}
	if !f.dryRun {
		if err := records.keep(); err != nil {
			fmt.Fprintln(stderr, "safe-ipam uninstall: keeping the records to forget:", err)
			return ExitError
		}
	}
	for _, name := range names {
		mode, err := ModeNamed(name)
		if err != nil {
			fmt.Fprintln(stderr, "safe-ipam uninstall:", err)
			return ExitError
		}
		r, err := Uninstall(f.node, mode, f.dryRun)
		code = max(code, report("uninstall", f, r, err, stdout, stderr))
		if errors.Is(err, ErrWatched) || errors.Is(err, ErrLocked) {
			break // the node's, not the mode's: the other mode would say it again
		}
	}
	if code != ExitOK {
		if !f.dryRun && !records.resumed {
			_ = records.done() // safe-ipam may still run, so its records stay, and nothing is half done
		}
		return code
	}
	return forgetRecords(f, records, stdout, stderr)
}

// forgetRecords is uninstall's second half, once Calico's files are back.
func forgetRecords(f *cliFlags, records *nodeRecords, stdout, stderr io.Writer) int {
	notes, err := records.forget(context.Background(), f.dryRun, f.releaseQuarantines, f.formerHosts)
	w := stdout
	if f.out.JSON {
		w = stderr // stdout is the JSON report
	}
	for _, note := range notes {
		fmt.Fprintln(w, "uninstall: "+note)
	}
	if err != nil {
		fmt.Fprintf(stderr, "safe-ipam uninstall: %v; the node is half uninstalled (safe-ipam doctor says so): run uninstall again once the store answers, and it finishes forgetting\n", err)
		return ExitError
	}
	if !f.dryRun {
		if err := records.done(); err != nil {
			fmt.Fprintln(stderr, "safe-ipam uninstall: every record is forgotten, but:", err)
			return ExitError
		}
	}
	return ExitOK
}

func report(cmd string, f *cliFlags, r *Result, err error, stdout, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintf(stderr, "safe-ipam %s: %v\n", cmd, err)
		if errors.Is(err, ErrRefused) || errors.Is(err, ErrLocked) || errors.Is(err, ErrWatched) {
			return ExitRefused
		}
		return ExitError
	}
	if f.out.JSON {
		out := struct {
			Mode    string   `json:"mode"`
			DryRun  bool     `json:"dryRun"`
			Changes []string `json:"changes"`
			Notes   []string `json:"notes,omitempty"`
		}{r.Mode, f.dryRun, r.Plan.Describe(), r.Notes}
		_ = f.out.Print(stdout, out, nil)
		return ExitOK
	}
	verb := "changed"
	if f.dryRun {
		verb = "would change"
	}
	for _, line := range r.Plan.Describe() {
		fmt.Fprintf(stdout, "%s (%s): %s %s\n", cmd, r.Mode, verb, line)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(stdout, "%s (%s): %s\n", cmd, r.Mode, n)
	}
	if r.Plan.Empty() {
		fmt.Fprintf(stdout, "%s (%s): nothing to do\n", cmd, r.Mode)
	}
	return ExitOK
}

// runWatch installs and keeps the install until SIGTERM or SIGINT.
func runWatch(f *cliFlags, mode Mode, self string, settings Settings, stderr io.Writer, check NodeCheck) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("cmd", "install --watch")
	w := &Watcher{Node: f.node, Mode: mode, Self: self, Settings: settings, Settle: f.settle, Log: log}
	observe := func(Reassertion) {}
	if f.metrics.Addr != "" {
		var stopped func()
		var err error
		if observe, stopped, err = watchMetrics(ctx, f.metrics, f.node, check, f.fullCheckEvery, log); err != nil {
			fmt.Fprintln(stderr, "safe-ipam install --watch:", err)
			return ExitError
		}
		defer stopped() // the probe socket goes with its listener
	}
	// Once safe-ipam is in place, records written before the address
	// index get their entries where the store takes writes here (Calico's
	// etcd; the DaemonSet mounts the file store read-only in this
	// container, and its gc container indexes that at its start).
	// In the background: a slow store must not hold up re-assertions.
	first := sync.OnceFunc(func() { go reindex(f.node, stderr, stderr) })
	w.Reasserted = func(r Reassertion) { first(); observe(r) }
	log.Info("watching", "bin", f.node.BinDir, "conf", f.node.ConfDir, "mode", mode.Name(), "settle", f.settle)
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "safe-ipam install --watch:", err)
		return ExitError
	}
	return ExitOK
}

// cniBinary is the binary install puts on the node: the CNI binary beside
// this one (safe-ipam-admin, which safe-ipam hands admin commands to).
func cniBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding its own binary: %w", err)
	}
	return cniBinaryBeside(self)
}

// cniBinaryBeside refuses when the CNI binary is missing: the admin binary
// is no CNI plugin, and installing it would break every pod start.
func cniBinaryBeside(self string) (string, error) {
	if filepath.Base(self) != builds.AdminBinary {
		return self, nil // a test binary, or safe-ipam renamed by an operator
	}
	lean := filepath.Join(filepath.Dir(self), builds.CNIBinary)
	if info, err := os.Stat(lean); err != nil || !info.Mode().IsRegular() {
		return "", fmt.Errorf("the CNI binary %s must be beside %s (make build puts them in bin/): %s is not a regular file", builds.CNIBinary, builds.AdminBinary, lean)
	}
	return lean, nil
}
