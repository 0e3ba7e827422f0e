package gc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/cninode"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// DefaultCNIPath is where the node's CNI plugins, and so the delegate, are.
const DefaultCNIPath = "/opt/cni/bin"

const usage = `Usage: safe-ipam gc --conf FILE [--cri-endpoint SOCKET | --cni-cache DIR | --live FILE]
                    [--dead-nodes] [--apply] [--every DURATION]

CNI GC for nodes where the runtime never sends it (Calico's main plugin
declares CNI 1.0.0 at most; containerd never sends GC). With a liveness
source, it lists this node's safe-ipam records of the network in FILE,
reads the source, and releases every record the source does not list, as
the GC verb does: mark, delegate DEL, forget. Records younger than
gcGracePeriod and pending records whose ADD still runs are kept. Fails
closed: a source that cannot be read, or that lists nothing while the node
has records, releases nothing.

With --dead-nodes it also releases the records (and their quarantines) of
every other node that Calico's datastore, as calico-ipam reaches it from
FILE, answers it does not know: kube-controllers frees a deleted node's
addresses, and its records would fence them for ever. A datastore that does
not answer releases nothing. Records are cluster-wide only in the etcd store.

A dry run unless --apply. With --every it runs again every DURATION until
SIGTERM, as the DaemonSet's gc container does; each run reads FILE again.

Example: safe-ipam gc --conf /etc/cni/net.d/10-calico.conflist \
           --cri-endpoint unix:///run/containerd/containerd.sock --dead-nodes --apply
Exit 0: nothing left to release; 1: a dry run would release; 2: error.
With --every it exits 0 when stopped; each run's errors go to stderr.

`

// node is --conf, --node and --cni-bin-dir: the network, its safe-ipam config
// and this node's name as the plugin resolves it.
type node struct {
	conf, name, cniPath string
	nodeSet             bool
	// kubeconfig is accepted only to refuse it with the reason.
	kubeconfig string
	file       *cninode.File
	// calico carries the node to the liveness group.
	calico *admin.Calico
}

func (n *node) Register(fs *flag.FlagSet) {
	fs.StringVar(&n.conf, "conf", "", "the node's CNI config or conflist whose IPAM is safe-ipam (required)")
	fs.StringVar(&n.name, "node", "", "this node's name (default: as safe-ipam names it from --conf: nodename, nodename_file, "+config.CalicoNodenameFile+", the host name)")
	fs.StringVar(&n.cniPath, "cni-bin-dir", DefaultCNIPath, "the node's CNI bin dir, where the delegate (calico-ipam) is found for its DELs (a CNI_PATH list is accepted)")
	fs.StringVar(&n.cniPath, "cni-path", DefaultCNIPath, "the older name of --cni-bin-dir")
	fs.StringVar(&n.kubeconfig, "kubeconfig", "", "refused: the pods API names pods, not containers, so every record would look running")
}

func (n *node) Resolve(cmd *admin.Command) error {
	if n.conf == "" {
		return errors.New("--conf is required: the CNI config whose network to collect")
	}
	if n.kubeconfig != "" {
		return errors.New("--kubeconfig: the pods API names pods and their addresses, not containers: gc needs --cri-endpoint, --cni-cache or --live")
	}
	n.nodeSet = cmd.Set("node")
	return n.read()
}

// read reads --conf: at the start, and again before each run of --every.
func (n *node) read() error {
	file, err := cninode.ReadFile(n.conf, binDirOf(n.cniPath))
	if err != nil {
		return err
	}
	if file.SafeIPAM == nil {
		return fmt.Errorf("--conf %s: the IPAM of network %q is not safe-ipam", n.conf, file.Network)
	}
	if n.nodeSet {
		file.SafeIPAM.Calico.Nodename = n.name
	}
	n.file = file
	n.calico.Node, n.calico.NodeErr = file.SafeIPAM.Node()
	return nil
}

// Run is `safe-ipam gc`; --every runs until SIGTERM or SIGINT.
func Run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return RunContext(ctx, args, stdout, stderr)
}

// RunContext is Run until ctx ends.
func RunContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	calico := &admin.Calico{}
	n := &node{calico: calico}
	live := admin.NewLiveness(calico.Place)
	live.ExplicitOnly = true
	out := admin.NewOutput(2 * time.Minute)
	r := &runner{node: n, live: live, out: out, stdout: stdout, stderr: stderr}
	cmd := admin.NewCommand("gc", usage, stderr, &r.metricsAddr, n, live, out)
	r.cmd = cmd
	cmd.Flags().BoolVar(&r.apply, "apply", false, "release (default: dry run, printing what would be released)")
	cmd.Flags().BoolVar(&r.deadNodes, "dead-nodes", false, "also release the records of other nodes that Calico's datastore answers it does not know")
	cmd.Flags().DurationVar(&r.every, "every", 0, "run again every `DURATION` (e.g. 5m) until stopped, as the DaemonSet does; a run that fails releases nothing and the next one tries again (default: run once)")
	if code, stop := cmd.ParseOrExit(args); stop {
		return code
	}
	if !live.Explicit() && !r.deadNodes {
		return cmd.FailUsage(errors.New("name what to collect: a liveness source (--cri-endpoint, --cni-cache or --live) for this node's records, --dead-nodes for the records of nodes that are gone, or both; gc never guesses what runs"))
	}
	if r.every < 0 {
		return cmd.FailUsage(fmt.Errorf("--every %v: want a positive duration such as 5m", r.every))
	}
	if r.every == 0 {
		if r.metricsAddr.Addr != "" {
			return cmd.FailUsage(errors.New("--metrics-addr needs --every: only a gc that keeps running serves metrics"))
		}
		return r.round(ctx)
	}
	if r.metricsAddr.Addr != "" {
		if err := r.serveMetrics(ctx); err != nil {
			return cmd.Fail(err)
		}
	}
	return r.loop(ctx)
}

// runner is one gc invocation: what to collect, and where to report it.
type runner struct {
	cmd            *admin.Command
	node           *node
	live           *admin.Liveness
	out            *admin.Output
	apply          bool
	deadNodes      bool
	every          time.Duration
	stdout, stderr io.Writer
	metricsAddr    admin.MetricsAddr
	// tally is what this round released and left; metrics report it.
	tally tally
	// observe, when metrics are served, is told of each round.
	observe func(code int, t tally)
}

// tally counts a round's records: released, and found to release but not
// released (a dry run, or a release that failed).
type tally struct{ released, stale int }

// round is one gc: this node's records judged by the liveness source,
// then other nodes' records judged by Calico's Nodes. Its exit code is
// the worse of the two.
func (r *runner) round(ctx context.Context) int {
	r.tally = tally{}
	code := admin.ExitOK
	if r.live.Explicit() {
		code = max(code, r.collectNode(ctx))
	}
	if r.deadNodes {
		code = max(code, r.collectDeadNodes(ctx))
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
	indexed := !r.apply // a dry run writes nothing
	for {
		if err := r.node.read(); err != nil {
			code := r.cmd.Fail(err)
			if r.observe != nil {
				r.observe(code, tally{})
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

// collectNode releases this node's records the liveness source does not
// list.
func (r *runner) collectNode(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, r.out.Timeout)
	defer cancel()
	cfg := r.node.file.SafeIPAM
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", "gc-admin")
	defer closeLog()
	node, err := OpenNode(ctx, r.node.file, r.node.cniPath, log)
	if err != nil {
		return r.cmd.Fail(err)
	}
	defer node.Close()
	c := &Collector{Node: node, Source: r.live.Source()}
	plan, report, err := c.Plan(ctx)
	if err != nil {
		return r.cmd.Fail(err)
	}
	code := admin.ExitOK
	switch {
	case r.apply && len(plan.Release) > 0:
		if err := c.Apply(ctx, plan, report); err != nil {
			code = admin.ExitError
		}
	case len(plan.Release) > 0:
		code = admin.ExitAttention
	}
	r.count(len(plan.Release), code)
	return r.print(report, r.text(report), code, report.Error)
}

// count adds n records a collection planned to the round's tally:
// released when it applied them all, else left. (A release that failed
// part-way counts its records as left: the next round tries them again.)
func (r *runner) count(n, code int) {
	if r.apply && code == admin.ExitOK {
		r.tally.released += n
	} else {
		r.tally.stale += n
	}
}

// text is how a round's report is printed: whole, except in a --every
// loop's run that released nothing.
func (r *runner) text(report *Report) func(io.Writer) error {
	if r.every > 0 && len(report.Release) == 0 {
		return report.WriteSummary
	}
	return report.WriteText
}

// print writes a round's report and, when it failed, its error.
func (r *runner) print(report any, text func(io.Writer) error, code int, reportErr string) int {
	if err := r.out.Print(r.stdout, report, text); err != nil {
		return r.cmd.Fail(err)
	}
	if code == admin.ExitError {
		fmt.Fprintf(r.stderr, "safe-ipam gc: %s\n", reportErr)
	}
	return code
}

// binDirOf is the directory of CNI_PATH the runtime would run calico-ipam
// from: the first that has one ("" when none does).
func binDirOf(cniPath string) string {
	for _, dir := range filepath.SplitList(cniPath) {
		if _, err := os.Stat(filepath.Join(dir, cninode.CalicoIPAM)); err == nil {
			return dir
		}
	}
	return ""
}

// collectDeadNodes is --dead-nodes: the records of other nodes that
// Calico's datastore answers it does not know.
func (r *runner) collectDeadNodes(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, r.out.Timeout)
	defer cancel()
	cfg := r.node.file.SafeIPAM
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", "gc-dead-nodes")
	defer closeLog()
	node, err := OpenNode(ctx, r.node.file, r.node.cniPath, log)
	if err != nil {
		return r.cmd.Fail(err)
	}
	defer node.Close()
	ds, closeDS, err := datastore.OpenCalico(ctx, admin.CalicoSettings(cfg.Calico, r.node.conf))
	if err != nil {
		return r.cmd.Fail(err)
	}
	defer closeDS()
	plan, report, err := node.PlanDeadNodes(ctx, ds)
	if errors.Is(err, ErrNodeLocalStore) {
		fmt.Fprintf(r.stdout, "gc --dead-nodes: %v; nothing to do\n", err)
		return admin.ExitOK
	}
	if err != nil {
		return r.cmd.Fail(err)
	}
	code := admin.ExitOK
	switch {
	case r.apply && plan.Len() > 0:
		if err := node.ApplyDeadNodes(ctx, plan, report); err != nil {
			code = admin.ExitError
		}
	case plan.Len() > 0:
		code = admin.ExitAttention
	}
	r.count(plan.Len(), code)
	return r.print(report, r.text(report), code, report.Error)
}
