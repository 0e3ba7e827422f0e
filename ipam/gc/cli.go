package gc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cninode"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// DefaultCNIPath is where the node's CNI plugins, and so the delegate, are.
const DefaultCNIPath = "/opt/cni/bin"

const usage = `Usage: safe-ipam gc --conf FILE (--cri-endpoint SOCKET | --cni-cache DIR | --live FILE) [--apply]
       safe-ipam gc --conf FILE --dead-nodes [--apply]

CNI GC for nodes where the runtime never sends it (Calico's main plugin
declares CNI 1.0.0 at most; containerd 1.6 sends no GC). Lists this
node's safe-ipam records of the network in FILE, reads the liveness source,
and releases every record the source does not list, as the GC verb does:
mark, delegate DEL, forget. Records younger than gcGracePeriod and pending
records whose ADD still runs are kept. A dry run unless --apply.
Fails closed: a source that cannot be read, or that lists nothing while the
node has records, releases nothing.

With --dead-nodes it releases instead the records (and their quarantines)
of every other node that Calico's datastore, as calico-ipam reaches it from
FILE, answers it does not know: kube-controllers frees a deleted node's
addresses, and its records would fence them for ever. A datastore that does
not answer releases nothing. Records are cluster-wide only in the etcd store.

Example: safe-ipam gc --conf /etc/cni/net.d/10-calico.conflist \
           --cri-endpoint unix:///run/containerd/containerd.sock --apply
Exit 0: nothing left to release; 1: a dry run would release; 2: error.

`

// node is --conf, --node and --cni-path: the network, its safe-ipam config
// and this node's name as the plugin resolves it.
type node struct {
	conf, name, cniPath string
	// kubeconfig is accepted only to refuse it with the reason.
	kubeconfig string
	file       *cninode.File
	// calico carries the node to the liveness group.
	calico *admin.Calico
}

func (n *node) Register(fs *flag.FlagSet) {
	fs.StringVar(&n.conf, "conf", "", "the node's CNI config or conflist whose IPAM is safe-ipam (required)")
	fs.StringVar(&n.name, "node", "", "this node's name (default: as safe-ipam names it from --conf: nodename, nodename_file, "+config.CalicoNodenameFile+", the host name)")
	fs.StringVar(&n.cniPath, "cni-path", DefaultCNIPath, "CNI_PATH in which to find the delegate (calico-ipam) for its DELs")
	fs.StringVar(&n.kubeconfig, "kubeconfig", "", "refused: the pods API names pods, not containers, so every record would look running")
}

func (n *node) Resolve(cmd *admin.Command) error {
	if n.conf == "" {
		return errors.New("--conf is required: the CNI config whose network to collect")
	}
	if n.kubeconfig != "" {
		return errors.New("--kubeconfig: the pods API names pods and their addresses, not containers: gc needs --cri-endpoint, --cni-cache or --live")
	}
	file, err := cninode.ReadFile(n.conf, binDirOf(n.cniPath))
	if err != nil {
		return err
	}
	if file.SafeIPAM == nil {
		return fmt.Errorf("--conf %s: the IPAM of network %q is not safe-ipam", n.conf, file.Network)
	}
	if cmd.Set("node") {
		file.SafeIPAM.Calico.Nodename = n.name
	}
	n.file = file
	n.calico.Node, n.calico.NodeErr = file.SafeIPAM.Node()
	return nil
}

// Run is `safe-ipam gc`.
func Run(args []string, stdout, stderr io.Writer) int {
	calico := &admin.Calico{}
	n := &node{calico: calico}
	live := admin.NewLiveness(calico.Place)
	out := admin.NewOutput(2 * time.Minute)
	cmd := admin.NewCommand("gc", usage, stderr, n, live, out)
	apply := cmd.Flags().Bool("apply", false, "release (default: dry run, printing what would be released)")
	deadNodes := cmd.Flags().Bool("dead-nodes", false, "release the records of other nodes that Calico's datastore answers it does not know, instead of judging this node's by a liveness source")
	if code, stop := cmd.ParseOrExit(args); stop {
		return code
	}
	if *deadNodes {
		if live.Explicit() {
			return cmd.Fail(errors.New("--dead-nodes judges by Calico's Nodes: name no liveness source"))
		}
		return runDeadNodes(cmd, n, out, *apply, stdout, stderr)
	}
	if !live.Explicit() {
		return cmd.Fail(errors.New("name the liveness source: --cri-endpoint, --cni-cache or --live; gc never guesses what runs"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), out.Timeout)
	defer cancel()
	cfg := n.file.SafeIPAM
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", "gc-admin")
	defer closeLog()
	node, err := OpenNode(ctx, n.file, n.cniPath, log)
	if err != nil {
		return cmd.Fail(err)
	}
	defer node.Close()
	c := &Collector{Node: node, Source: live.Source()}
	plan, report, err := c.Plan(ctx)
	if err != nil {
		return cmd.Fail(err)
	}
	code := admin.ExitOK
	switch {
	case *apply && len(plan.Release) > 0:
		if err := c.Apply(ctx, plan, report); err != nil {
			code = admin.ExitError
		}
	case len(plan.Release) > 0:
		code = admin.ExitAttention
	}
	if err := out.Print(stdout, report, report.WriteText); err != nil {
		return cmd.Fail(err)
	}
	if code == admin.ExitError {
		fmt.Fprintf(stderr, "safe-ipam gc: %s\n", report.Error)
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

// runDeadNodes is gc --dead-nodes.
func runDeadNodes(cmd *admin.Command, n *node, out *admin.Output, apply bool, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), out.Timeout)
	defer cancel()
	cfg := n.file.SafeIPAM
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", "gc-dead-nodes")
	defer closeLog()
	node, err := OpenNode(ctx, n.file, n.cniPath, log)
	if err != nil {
		return cmd.Fail(err)
	}
	defer node.Close()
	ds, closeDS, err := CalicoDatastore(ctx, cfg, n.conf)
	if err != nil {
		return cmd.Fail(err)
	}
	defer closeDS()
	plan, report, err := node.PlanDeadNodes(ctx, ds)
	if errors.Is(err, ErrNodeLocalStore) {
		fmt.Fprintf(stdout, "gc --dead-nodes: %v; nothing to do\n", err)
		return admin.ExitOK
	}
	if err != nil {
		return cmd.Fail(err)
	}
	code := admin.ExitOK
	switch {
	case apply && plan.Len() > 0:
		if err := node.ApplyDeadNodes(ctx, plan, report); err != nil {
			code = admin.ExitError
		}
	case plan.Len() > 0:
		code = admin.ExitAttention
	}
	if err := out.Print(stdout, report, report.WriteText); err != nil {
		return cmd.Fail(err)
	}
	if code == admin.ExitError {
		fmt.Fprintf(stderr, "safe-ipam gc: %s\n", report.Error)
	}
	return code
}
