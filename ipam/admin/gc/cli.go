package gc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

const usage = `Usage: safe-ipam gc --conf FILE [%s]
                    [--former-node NAME] [--former-host NAME]
                    [--dead-nodes [--dead-node-grace DURATION]
                    [--dead-node-max-share FRACTION]]
                    [--quarantine-grace DURATION]
                    [--apply] [--every DURATION]

CNI GC for nodes where the runtime never sends it (Calico's main plugin
declares CNI 1.0.0 at most; containerd never sends GC). With a liveness
source, it lists this node's safe-ipam records of the network in FILE,
reads the source, and releases every record the source does not list, as
the GC verb does: mark, delegate DEL, forget. Records younger than
gcGracePeriod and pending records whose ADD still runs are kept, and so
are records another host wrote under this node's Calico name (a stale
nodename: two machines share it), with a warning. Fails
closed: a source that cannot be read, or that lists nothing while the node
has records, releases nothing.

With --former-node NAME (the etcd store) it also judges, by the same source,
the records this machine wrote under NAME, a Calico node name it had before:
after a stale nodename is fixed, or a node renamed, while pods ran, their
DELs look under the new name, and the records under NAME would fence their
addresses for ever. Records another machine wrote under NAME, and those
without a host, are kept. With --former-host NAME (the etcd store), the
records written by host NAME, a host name this machine had before (a
host rename), are judged as this machine's.

With --dead-nodes it also releases the records (and their quarantines) of
every other node that Calico's datastore, as calico-ipam reaches it from
FILE, answers it does not know: kube-controllers frees a deleted node's
addresses, and its records would fence them for ever. As kube-controllers
does, a node's records go only once two sweeps found it gone, the later at
least --dead-node-grace after the first by etcd's clock (the sweeps note it
in the store, with a lease of the grace). A datastore that does not answer
releases nothing, and so does a Nodes listing that lacks this very node or
more than --dead-node-max-share of the nodes known (listed, or holding
records) at once (a wrong prefix or endpoint, a datastore restored from an
old backup): the round fails, says why, and sets the metric
safe_ipam_gc_dead_node_sweep_refused. Records are cluster-wide only in the
etcd store. With --every and --apply, the gc of one node per cluster
sweeps: the nodes elect it in the store (etcd's election, under the
store's prefix); the others only ask who leads, and a leader whose sweeps
fail twice in a row gives the lead up. A dry-run loop neither campaigns
nor sweeps.

On Calico's Kubernetes datastore with the file store, where the cluster
serves AddressClaims (deploy/safe-ipam-claims.yaml), each run with --apply
also settles this node's cluster-wide claims: it forgets those no record
of this machine holds (older than a minute, no ADD of theirs running),
claims the addresses of records that have none, and releases each
allocation quarantined here for another node's holder once that holder's
claim was found gone by two runs at least --quarantine-grace apart.
There --dead-nodes sweeps the claims of dead nodes (their records went
with them): the claims of a node Calico does not know go once two sweeps
found it gone, --dead-node-grace apart by the API server's clock; the
loops elect the sweeping node through the Lease
kube-system/safe-ipam-sweep.<network>, which keeps the sweeps' notes.

A dry run unless --apply. With --every it runs again every DURATION until
SIGTERM, as the DaemonSet's gc container does; each run reads FILE again.

Example: safe-ipam gc --conf /etc/cni/net.d/10-calico.conflist \
           --cri-endpoint unix:///run/containerd/containerd.sock --dead-nodes --apply
Exit 0: nothing left to release; 1: a dry run would release; 2: error.
With --every it exits 0 when stopped; each run's errors go to stderr.

`

// Run is `safe-ipam gc`; --every runs until SIGTERM or SIGINT.
func Run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return RunContext(ctx, args, stdout, stderr)
}

// RunContext is Run until ctx ends.
func RunContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	r := newRunner(stdout, stderr)
	cmd, live := r.cmd, r.live
	if code, stop := cmd.ParseOrExit(args); stop {
		return code
	}
	if err := r.checkConf(); err != nil {
		return cmd.FailUsage(err)
	}
	if len(r.formerNodes)+len(r.formerHosts) > 0 && !live.Explicit() {
		return cmd.FailUsage(errors.New("--former-node and --former-host need a liveness source: this machine's runtime judges the records it wrote"))
	}
	if !live.Explicit() && !r.deadNodes {
		return cmd.FailUsage(errors.New("name what to collect: a liveness source (" + liveness.Say(liveness.NamesContainers, liveness.Kind.FlagName, "or") + ") for this node's records, --dead-nodes for the records of nodes that are gone, or both; gc never guesses what runs"))
	}
	if !(r.maxGoneShare > 0 && r.maxGoneShare <= 1) {
		return cmd.FailUsage(fmt.Errorf("--dead-node-max-share %v: want a fraction above 0 and at most 1, such as 0.5", r.maxGoneShare))
	}
	if r.deadGrace < 0 {
		return cmd.FailUsage(fmt.Errorf("--dead-node-grace %v: want a duration of zero or more, such as 10m", r.deadGrace))
	}
	if r.quarantineGrace < 0 {
		return cmd.FailUsage(fmt.Errorf("--quarantine-grace %v: want a duration of zero or more, such as 10m", r.quarantineGrace))
	}
	for _, former := range r.formerNodes {
		if former == r.conf.Node {
			return cmd.FailUsage(fmt.Errorf("--former-node %s is this node's Calico name now: its records are judged anyway; name the one it had before", former))
		}
	}
	if r.every < 0 {
		return cmd.FailUsage(fmt.Errorf("--every %v: want a positive duration such as 5m", r.every))
	}
	if r.every == 0 {
		if r.metricsAddr.Addr != "" {
			return cmd.FailUsage(errors.New("--metrics-addr needs --every: only a gc that keeps running serves metrics"))
		}
		defer r.sweeper.close()
		return r.round(ctx)
	}
	if r.metricsAddr.Addr != "" {
		if err := r.serveMetrics(ctx); err != nil {
			return cmd.Fail(err)
		}
		defer r.metricsDone() // the probe socket goes with its listener
	}
	return r.loop(ctx)
}

// newRunner is gc's flags: the node's config and name, the liveness
// source (one that names containers), output and --apply, then gc's own.
func newRunner(stdout, stderr io.Writer) *runner {
	conf := &admin.NodeConf{Required: "the CNI config whose network to collect, its IPAM safe-ipam",
		BinDirUse: "; gc finds the delegate (calico-ipam) there for its DELs (a CNI_PATH list is accepted)"}
	live := admin.NewLiveness(conf.Place)
	live.ExplicitOnly, live.Containers = true, true
	r := &runner{conf: conf, live: live, out: admin.NewOutput(2 * time.Minute), apply: admin.NewApply("release", "be released"),
		stdout: stdout, stderr: stderr}
	r.cmd = admin.NewCommand("gc", fmt.Sprintf(usage, liveness.Say(liveness.NamesContainers, liveness.Kind.FlagArg, "|")), stderr, &r.metricsAddr, conf, live, r.out, r.apply)
	fs := r.cmd.Flags()
	fs.StringVar(&conf.BinDir, "cni-path", admin.DefaultBinDir, "the older name of --cni-bin-dir")
	fs.BoolVar(&r.deadNodes, "dead-nodes", false, "also release the records of other nodes that Calico's datastore answers it does not know (with --every, on the one node elected to)")
	fs.DurationVar(&r.deadGrace, "dead-node-grace", DefaultDeadNodeGrace, "release a gone node's records on a sweep at least `DURATION` after the sweep that first found it gone")
	fs.DurationVar(&r.quarantineGrace, "quarantine-grace", rulebook.RemoteQuarantineGrace, "release an allocation quarantined for another node's holder once the holder's claim was found gone by two runs at least `DURATION` apart")
	fs.Float64Var(&r.maxGoneShare, "dead-node-max-share", rulebook.DefaultMaxGoneShare, "release nothing when Calico's Nodes lack more than this `FRACTION` of the nodes known (listed, or holding records) at once")
	fs.Func("former-node", "also judge, by the liveness source, the records this machine wrote under `NAME`, a Calico node name it had before (a stale nodename fixed, a rename); repeatable", func(v string) error {
		if err := record.ValidateNode(v); err != nil {
			return err
		}
		r.formerNodes = append(r.formerNodes, v)
		return nil
	})
	fs.Func("former-host", "also judge, by the liveness source, the records host `NAME` wrote under this node's Calico name, a host name this machine had before (a host rename); repeatable", func(v string) error {
		if v == "" {
			return errors.New("a host name, not empty")
		}
		r.formerHosts = append(r.formerHosts, v)
		return nil
	})
	fs.DurationVar(&r.every, "every", 0, "run again every `DURATION` (e.g. 5m) until stopped, as the DaemonSet does; a run that fails releases nothing and the next one tries again (default: run once)")
	return r
}

// runner is one gc invocation: what to collect, and where to report it.
type runner struct {
	cmd             *admin.Command
	conf            *admin.NodeConf
	live            *admin.Liveness
	out             *admin.Output
	apply           *admin.Apply
	deadNodes       bool
	deadGrace       time.Duration
	quarantineGrace time.Duration
	maxGoneShare    float64
	formerNodes     []string
	formerHosts     []string
	every           time.Duration
	stdout, stderr  io.Writer
	metricsAddr     admin.MetricsAddr
	metricsDone     func() // waits, once the loop ends, for the metrics to stop
	// tally is what this round released and left; metrics report it.
	tally tally
	// observe, when metrics are served, is told of each round.
	observe func(code int, t tally)
	// sweeper is the store the --every loop campaigns through to sweep.
	sweeper sweeper
}

// tally counts a round's records: released, and found to release but not
// released (a dry run, or a release that failed); refused is 1 when this
// round's dead-node sweep was refused, 0 when it swept, -1 when this node
// did not sweep (another leads). leader is who leads the sweeps, as this
// round asked ("" when it did not ask, "-" when nobody does); swept is
// 1 when this node swept and the sweep succeeded, 0 when it failed, -1
// when it did not sweep; sweepReleased, the records its sweep released.
type tally struct {
	released, stale, refused int
	leader                   string
	swept, sweepReleased     int
}

// newTally is a round's tally before it runs.
func newTally() tally { return tally{refused: -1, swept: -1} }

// round is one gc: this node's records judged by the liveness source,
// then other nodes' records judged by Calico's Nodes. Its exit code is
// the worse of the two.
func (r *runner) round(ctx context.Context) int {
	r.tally = newTally()
	code := admin.ExitOK
	if r.live.Explicit() {
		code = max(code, r.collectNode(ctx))
	}
	if r.deadNodes {
		code = max(code, r.collectDeadNodes(ctx))
	}
	if r.apply.On && claims.Kept(r.conf.File.SafeIPAM) {
		code = max(code, r.settleClaims(ctx))
	}
	if r.observe != nil {
		r.observe(code, r.tally)
	}
	return code
}

// loop runs a round every period until ctx ends. The node's config is
// read again each time: calico-node may rewrite it, and a round that
// cannot read it only waits for the next.
func (r *runner) loop(ctx context.Context) int {
	indexed := !r.apply.On // a dry run writes nothing
	defer r.sweeper.close()
	for {
		if err := r.readConf(); err != nil {
			r.failedSweep()
			code := r.cmd.Fail(err)
			if r.observe != nil {
				r.observe(code, newTally())
			}
		} else {
			indexed = indexed || r.reindex(ctx)
			r.round(ctx)
		}
		select {
		case <-ctx.Done():
			return admin.ExitOK
		case <-time.After(r.every):
		}
	}
}

// readConf reads --conf again, as calico-node may have rewritten it.
func (r *runner) readConf() error {
	if err := r.conf.Read(); err != nil {
		return err
	}
	return r.checkConf()
}

// checkConf refuses a --conf whose IPAM is not safe-ipam, and makes
// --node the name its records are under.
func (r *runner) checkConf() error {
	file := r.conf.File
	if file.SafeIPAM == nil {
		return fmt.Errorf("--conf %s: the IPAM of network %q is not safe-ipam", r.conf.Conf, file.Network)
	}
	if r.cmd.Set("node") {
		file.SafeIPAM.Calico.Nodename = r.conf.Node
	}
	r.conf.Node, r.conf.NodeErr = file.SafeIPAM.Node()
	return nil
}

// collectNode releases this node's records the liveness source does not
// list.
func (r *runner) collectNode(ctx context.Context) int {
	code := admin.ExitOK
	// chaos:gc-forgets-former-nodes (a mutant breaks what follows)
	for _, former := range append([]string{""}, r.formerNodes...) {
		code = max(code, r.collect(ctx, "gc-admin", func(ctx context.Context, node *Releaser) (*Report, func() error, int, error) {
			c := &Collector{Node: node, Source: r.live.Source(), Former: former, FormerHosts: r.formerHosts}
			plan, report, err := c.Plan(ctx)
			if err != nil {
				return nil, nil, 0, err
			}
			return report, func() error { return c.Apply(ctx, plan, report) }, len(plan.Release), nil
		}))
	}
	return code
}

// collectDeadNodes is --dead-nodes: the records of other nodes that
// Calico's datastore answers it does not know. In a --every loop, only
// on the node elected to sweep.
func (r *runner) collectDeadNodes(ctx context.Context) int {
	// chaos:dry-run-loop-campaigns (a mutant breaks what follows)
	if r.every > 0 && !r.apply.On {
		// A dry-run loop writes nothing, so it never campaigns (it would
		// lead and never sweep), and it does not sweep either: every node's
		// loop would then read every node's records each period.
		fmt.Fprintf(r.stdout, "gc --dead-nodes: a dry-run loop does not sweep (one --apply loop per cluster is elected to); run gc --dead-nodes once by hand to see what a sweep would release\n")
		return admin.ExitOK
	}
	if r.every > 0 {
		leader, err := r.sweeper.lead(ctx, r.conf, sweepTTL*r.every, true)
		if errors.Is(err, claims.ErrClaimsOff) {
			return r.claimsNotSwept(err)
		}
		if err != nil {
			r.failedSweep()
			return r.cmd.Fail(fmt.Errorf("who sweeps dead nodes? %w; nothing is released", err))
		}
		r.tally.leader = cmp.Or(leader, "-")
		r.sweeper.noteLeader(r.stderr, leader == r.conf.Node, r.conf.File.Network, leader)
		if leader != r.conf.Node {
			if leader == "" {
				leader = "nobody (this node holds off after a failed sweep)"
			}
			fmt.Fprintf(r.stdout, "gc --dead-nodes: %s sweeps the records of network %s; not this node\n", leader, r.conf.File.Network)
			return admin.ExitOK
		}
	}
	releasedBefore := r.tally.released
	code := r.collect(ctx, "gc-dead-nodes", func(ctx context.Context, node *Releaser) (*Report, func() error, int, error) {
		cfg := r.conf.File.SafeIPAM
		ds, closeDS, err := datastore.OpenCalico(ctx, admin.CalicoSettings(cfg.Calico, r.conf.Conf))
		if err != nil {
			return nil, nil, 0, err
		}
		defer closeDS()
		node.MaxGoneShare = r.maxGoneShare
		r.tally.refused = 0
		if claims.Kept(cfg) {
			return r.sweepClaims(ctx, node, ds)
		}
		plan, report, err := node.PlanDeadNodes(ctx, ds, r.deadGrace)
		if errors.Is(err, ErrNodeLocalStore) {
			fmt.Fprintf(r.stdout, "gc --dead-nodes: %v; nothing to do\n", err)
			return nil, nil, 0, nil
		}
		if errors.Is(err, ErrUntrustedNodes) {
			r.tally.refused = 1
		}
		if err == nil && r.apply.On {
			err = node.NoteSweep(ctx, plan)
		}
		if err != nil {
			return nil, nil, 0, err
		}
		return report, func() error { return node.ApplyDeadNodes(ctx, plan, report) }, plan.Len(), nil
	})
	if r.every > 0 {
		r.sweeper.swept(code != admin.ExitError)
		r.tally.swept, r.tally.sweepReleased = 0, r.tally.released-releasedBefore
		if code != admin.ExitError {
			r.tally.swept = 1
		}
	}
	return code
}

// failedSweep counts a round that could not reach the sweep (its --conf
// unreadable or no longer safe-ipam's, its node unnamed, the election
// unanswered) as a failed sweep: leading means sweeping successfully.
func (r *runner) failedSweep() {
	if r.deadNodes && r.every > 0 && r.apply.On {
		r.sweeper.swept(false)
	}
}

// plan is one collection's planning on the opened node: its report, how
// to apply it, and how many records it releases (no report: nothing to
// do).
type plan func(ctx context.Context, node *Releaser) (report *Report, apply func() error, n int, err error)

// collect runs one collection within the time limit, on this node's store
// opened with a log for verb: it plans, applies with --apply, counts and
// prints. Its exit code: 0 when nothing is left to release, 1 for a dry
// run that would release, 2 for an error.
func (r *runner) collect(ctx context.Context, verb string, planOn plan) int {
	ctx, cancel := context.WithTimeout(ctx, r.out.Timeout)
	defer cancel()
	cfg := r.conf.File.SafeIPAM
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", verb)
	defer closeLog()
	node, err := OpenReleaser(ctx, r.conf.File, r.conf.BinDir, log)
	if err != nil {
		return r.cmd.Fail(err)
	}
	defer node.Close()
	report, apply, n, err := planOn(ctx, node)
	if err != nil || report == nil {
		if err != nil {
			return r.cmd.Fail(err)
		}
		return admin.ExitOK
	}
	code := admin.ExitOK
	switch {
	case r.apply.On && n > 0:
		if err := apply(); err != nil {
			code = admin.ExitError
		}
	case n > 0:
		code = admin.ExitAttention
	}
	r.count(n, code)
	return r.print(report, code)
}

// count adds n records a collection planned to the round's tally:
// released when it applied them all, else left. (A release that failed
// part-way counts its records as left: the next round tries them again.)
func (r *runner) count(n, code int) {
	if r.apply.On && code == admin.ExitOK {
		r.tally.released += n
	} else {
		r.tally.stale += n
	}
}

// print writes a round's report and, when it failed, its error. In a
// --every loop, a run that released nothing prints its summary alone.
func (r *runner) print(report *Report, code int) int {
	text := report.WriteText
	if r.every > 0 && len(report.Release) == 0 {
		text = report.WriteSummary
	}
	if err := r.out.Print(r.stdout, report, text); err != nil {
		return r.cmd.Fail(err)
	}
	if code == admin.ExitError {
		fmt.Fprintf(r.stderr, "safe-ipam gc: %s\n", report.Error)
	}
	return code
}
