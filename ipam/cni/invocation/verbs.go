package invocation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/cachedir"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/cni/lookup"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/failnote"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// Verbs are the CNI verbs of one CNI build, as the container runtime
// calls them through skel: one method per verb, one verb per process.
type Verbs struct {
	// Trace, when SAFE_IPAM_TRACE is set, records when each phase ended
	// for `make bench`.
	Trace *logging.Trace
	// At is the crash tests' hook at every guard.Step (CrashPoint: nil
	// outside builds with -tags crashpoints).
	At func(guard.Step)
	// Program is this build's name (builds.CNIBinary or EtcdBinary), as
	// its version line says it.
	Program string
	// Backends are what this build reaches (Lean, or backends.Full).
	Backends Backends
	// HandOverTo names the build beside this one that a call whose record
	// store is etcd is handed to when Backends do not open one.
	HandOverTo string
	// Grace is how long a verb may run past its deadline before the call
	// returns without it (0: config.VerbGrace).
	Grace time.Duration
}

// Add runs ADD and prints its result, once the verb is done: a verb left
// behind at its deadline (stopAt) prints nothing beside the error.
func (r Verbs) Add(args *skel.CmdArgs) error {
	var res types.Result
	err := r.run("ADD", args, func(ctx context.Context, g *guard.Guard, env delegate.Env) (err error) {
		res, err = g.Add(ctx, env)
		return err
	})
	if err != nil {
		return err
	}
	return types.PrintResult(res, res.Version())
}

// Del runs DEL.
func (r Verbs) Del(args *skel.CmdArgs) error {
	return r.run("DEL", args, func(ctx context.Context, g *guard.Guard, env delegate.Env) error {
		return g.Del(ctx, env)
	})
}

// Check runs CHECK.
func (r Verbs) Check(args *skel.CmdArgs) error {
	return r.run("CHECK", args, func(ctx context.Context, g *guard.Guard, env delegate.Env) error {
		return g.Check(ctx, env)
	})
}

// GC runs GC, with the valid attachments the runtime lists in its config.
func (r Verbs) GC(args *skel.CmdArgs) error {
	return r.run(VerbGC, args, func(ctx context.Context, g *guard.Guard, env delegate.Env) error {
		return g.GC(ctx, env, args.StdinData)
	})
}

// Status runs STATUS.
func (r Verbs) Status(args *skel.CmdArgs) error {
	return r.run(VerbStatus, args, func(ctx context.Context, g *guard.Guard, env delegate.Env) error {
		return g.Status(ctx, env)
	})
}

// run parses the config the runtime passed (with the node settings beside
// the binary), hands the call over when this build does not open the etcd
// store it names, logs where it says, opens the call under its
// ipam.verbTimeout and runs verb on its Guard. It runs once per process:
// what it opens, the process's exit closes. A verb stopped by that
// deadline fails with code 11 (guard.PastDeadline); one that does not
// stop (stopAt) is left to the process's exit.
func (r Verbs) run(verb string, args *skel.CmdArgs, run func(context.Context, *guard.Guard, delegate.Env) error) error {
	started := builds.CallStarted(time.Now())
	ctx := logging.WithTrace(context.Background(), r.Trace)
	defer r.Trace.Write()
	env := delegate.Env{ContainerID: args.ContainerID, NetNS: args.Netns, IfName: args.IfName, Args: args.Args, Path: args.Path}
	cfg, err := within(config.DefaultVerbTimeout, func() (*config.Config, error) { return config.ParseOnNode(args.StdinData, ownDir()) })
	if err != nil {
		return err
	}
	// Until the process exits: uninstall waits for the calls at work.
	defer cachedir.HoldCall(cfg.CacheDir)()
	if cfg.Store.Type == config.StoreEtcd && !r.Backends.EtcdStore && r.HandOverTo != "" {
		err := builds.HandOver(r.HandOverTo, args.StdinData, started) // returns only on failure
		noteOutcome(verb, cfg, err)
		return err
	}
	// From the call's start, not from here: the parse and a hand-over
	// count against the same ipam.verbTimeout.
	ctx, cancel := context.WithDeadline(ctx, started.Add(cfg.VerbTimeout))
	defer cancel()
	grace := r.Grace
	if grace <= 0 {
		grace = config.VerbGrace
	}
	err = stopAt(ctx, grace, func() error {
		log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", verb, "container", env.ContainerID, "ifname", env.IfName)
		defer closeLog()
		return r.runOpened(ctx, verb, cfg, env, log, run)
	})
	if errors.Is(err, errStillBlocked) {
		// Said in the CNI error alone: the log's writer may be what is
		// blocked, and the step still holds its lock. No note either: the
		// cache dir may be on the filesystem that hangs.
		return guard.PastDeadline(ctx, verb, cfg.VerbTimeout, err)
	}
	noteOutcome(verb, cfg, err)
	return err
}

// noteOutcome tells the watch how an ADD or DEL went (package failnote):
// a failure of the node's leaves a note of its network, an ADD that
// succeeds removes it. It waits for the cache dir at most noteWait: the
// note must never hold up the call (a dir that blocks writes), and the
// process's exit ends what it leaves behind.
func noteOutcome(verb string, cfg *config.Config, err error) {
	note := func() {}
	switch {
	case err == nil && verb == "ADD":
		note = func() { failnote.Clear(cfg.CacheDir, cfg.Network) }
	case err != nil && (verb == "ADD" || verb == "DEL") && guard.NodeFailing(err):
		n := failnote.Note{At: time.Now().UTC(), Verb: verb, Network: cfg.Network, Msg: err.Error()}
		var cniErr *types.Error
		if errors.As(err, &cniErr) {
			n.Code = cniErr.Code
		}
		note = func() { failnote.Write(cfg.CacheDir, n) }
	default:
		return
	}
	done := make(chan struct{})
	go func() { note(); close(done) }()
	select {
	case <-done:
	case <-time.After(noteWait):
	}
}

// noteWait bounds how long a call waits for its failure note.
const noteWait = 200 * time.Millisecond

// errStillBlocked is the error of a verb that did not return within
// config.VerbGrace of its deadline.
var errStillBlocked = errors.New("a step still blocked (a hung filesystem?): the call ends here, and the process with it, as a crash ends it")

// stopAt runs f, and returns errStillBlocked when f has not returned
// grace after ctx ends. The caller's process exits then; every store
// write is crash-safe, so what f leaves half done is what a crash leaves.
func stopAt(ctx context.Context, grace time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errStillBlocked
	}
}

// runOpened opens the call under ctx and runs verb on its Guard.
func (r Verbs) runOpened(ctx context.Context, verb string, cfg *config.Config, env delegate.Env, log *slog.Logger, run func(context.Context, *guard.Guard, delegate.Env) error) error {
	o, err := Open(ctx, Call{Verb: verb, Env: env, Config: cfg, Log: log, Backends: r.Backends})
	if err != nil {
		err = guard.PastDeadline(ctx, verb, cfg.VerbTimeout, err)
		log.Error("refused", "error", err)
		return err
	}
	// o is not closed: the process ends once the verb returns, and the
	// kernel closes its connections and files then. Every durable write
	// is done by that time (etcd has acknowledged it, the file store has
	// synced it) and the file store's locks last one operation each, so
	// a close would only spend the runtime's time (the etcd client's is a
	// graceful gRPC shutdown, about 0.1 ms; docs/performance.md).
	r.Trace.Mark(logging.MarkOpened)
	o.Guard.At = r.At
	defer r.Trace.Mark(logging.MarkRan)
	err = run(ctx, o.Guard, env)
	if ctx.Err() != nil && err != nil {
		err = guard.PastDeadline(ctx, verb, cfg.VerbTimeout, err)
		log.Error("stopped at the deadline", "error", err)
	}
	return err
}

// within runs parse under a deadline of its own: the config names files
// (the node settings, nodename_file) that are read before the config's
// own ipam.verbTimeout is known. Each is opened without blocking and must
// be a regular file (package bounded), so only a hung filesystem can
// hold it; then the call fails with 11 rather than hang the runtime.
func within(d time.Duration, parse func() (*config.Config, error)) (*config.Config, error) {
	type parsed struct {
		cfg *config.Config
		err error
	}
	done := make(chan parsed, 1)
	go func() {
		cfg, err := parse()
		done <- parsed{cfg, err}
	}()
	select {
	case p := <-done:
		return p.cfg, p.err
	case <-time.After(d):
		return nil, types.NewError(types.ErrTryAgainLater, fmt.Sprintf("reading the network config and the files it names did not finish within %s", d), "")
	}
}

// ownDir is the directory the binary runs from, where install keeps the
// node settings ("" when it cannot tell: none are read).
func ownDir() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Dir(self)
}

// Main is a CNI build's main: the trace (exec and init are done when it
// starts), then a read of Calico's etcd for the lean build beside it
// (builds.ReadEnv), or an admin command when run without CNI_COMMAND
// (builds.RunAdmin), else the verb through skel. r's Backends and HandOverTo
// say which build it is.
func Main(r Verbs, version string) {
	r.Trace, r.At = logging.NewTrace(), CrashPoint
	if os.Getenv(builds.ReadEnv) != "" {
		os.Exit(serveRead(r.Backends))
	}
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(builds.RunAdmin(os.Args[1:], r.Program, version))
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: r.Add, Del: r.Del, Check: r.Check, GC: r.GC, Status: r.Status},
		cniversion.PluginSupports(about.CNIVersions...),
		r.Program+" "+version+": CNI IPAM in front of calico-ipam; run 'safe-ipam --help' for admin commands")
}

// serveRead answers one read of Calico's etcd (lookup.Serve) in the
// build that links the etcd client; the lean build, whose reader of
// Calico's etcd is this very read, refuses it.
func serveRead(b Backends) int {
	open := b.CalicoEtcd
	if !b.EtcdStore {
		open = func(config.CalicoSettings, lookup.Warn) lookup.Reader {
			return lookup.Unavailable("this build of safe-ipam does not read Calico's etcd: " + builds.EtcdBinary + " does")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookup.ServeTimeout)
	defer cancel()
	if err := lookup.Serve(ctx, os.Stdin, os.Stdout, open); err != nil {
		fmt.Fprintln(os.Stderr, "safe-ipam: answering a read of Calico's etcd:", err)
		return 1
	}
	return 0
}
