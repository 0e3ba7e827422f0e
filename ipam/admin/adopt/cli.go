package adopt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

const usage = `Usage: safe-ipam adopt --conf FILE [%s] [--apply]

Gives every running attachment of --conf's network on this node that has
no record a committed record: its addresses as the runtime saw them, its
pod, and the handle that holds them in Calico's data. An attachment whose
address Calico shows free or under another handle is reported as an early
release and adopted, so that fencing keeps the address from the next ADD.
Dry run by default; --apply writes, never over a record that appeared
meanwhile. Exit 0: nothing (left) to write and no early release; 1: a dry
run with records to write, or early releases; 2: error (a source, Calico's
data or the store that cannot be read: nothing written; or a failed write).

Example: safe-ipam adopt --conf /etc/cni/net.d/10-calico.conflist \
           --cri-endpoint unix:///run/containerd/containerd.sock --apply

`

// cli is one run of adopt.
type cli struct {
	cmd    *admin.Command
	calico *admin.Datastores
	live   *admin.Liveness
	out    *admin.Output
	apply  *admin.Apply
	stderr io.Writer
}

// Run is `safe-ipam adopt`.
func Run(args []string, stdout, stderr io.Writer) int {
	c := &cli{calico: &admin.Datastores{}, out: admin.NewOutput(2 * time.Minute), stderr: stderr,
		apply: admin.NewApply("write the records", "be written")}
	c.live = admin.NewLiveness(c.calico.Place)
	c.cmd = admin.NewCommand("adopt", fmt.Sprintf(usage, liveness.Say(liveness.NamesContainers, liveness.Kind.FlagArg, "|")), stderr, c.calico, c.live, c.out, c.apply)
	if code, stop := c.cmd.ParseOrExit(args); stop {
		return code
	}
	cfg, err := c.config()
	if err != nil {
		return c.cmd.Fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.out.Timeout)
	defer cancel()
	plan, err := c.run(ctx, cfg)
	if err != nil {
		return c.cmd.Fail(err)
	}
	c.warn(plan)
	if err := c.out.Print(stdout, plan, plan.WriteText); err != nil {
		return c.cmd.Fail(err)
	}
	return plan.exitCode()
}

// config is safe-ipam's config from --conf: adopt writes records where
// the plugin would, so it needs the file that routes IPAM through it.
func (c *cli) config() (*config.Config, error) {
	f := c.calico.File
	switch {
	case f == nil:
		return nil, errors.New("--conf is required: the node's CNI config that names safe-ipam")
	case f.SafeIPAM == nil:
		return nil, fmt.Errorf("--conf %s: its IPAM is not safe-ipam, so there is nothing to adopt into", f.Path)
	case c.calico.Network != f.Network:
		return nil, fmt.Errorf("--network %q: --conf %s is network %q", c.calico.Network, f.Path, f.Network)
	case c.calico.NodeErr != nil:
		return nil, fmt.Errorf("cannot tell this node's name as Calico does (%v); pass --node", c.calico.NodeErr)
	case record.ValidateNode(c.calico.Node) != nil:
		// Records belong to one node; every node's list (--live with
		// --node "") would give this node records of pods it does not run.
		return nil, fmt.Errorf("adopt writes this node's records: --node %q does not name one node", c.calico.Node)
	}
	return f.SafeIPAM, nil
}

// run reads the source, then Calico's data, then plans against the
// store, and writes only after all three were read.
func (c *cli) run(ctx context.Context, cfg *config.Config) (*Plan, error) {
	node := c.calico.Node
	source, entries, skipped, err := readEntries(ctx, c.live.Source())
	if err != nil {
		return nil, err
	}
	holders, err := c.holders(ctx, cfg.Network)
	if err != nil {
		return nil, err
	}
	st, err := opener.Open(ctx, cfg, node, opener.Options{In: c.calico.Conf})
	if err != nil {
		return nil, fmt.Errorf("--conf %s: record store: %w", c.calico.Conf, err)
	}
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", "adopt")
	defer closeLog()
	// As ADD commits: on Calico's Kubernetes datastore the record claims
	// its addresses cluster-wide, and another node's live claim is a
	// holder (a duplicate) as a record of this node is.
	st = invocation.Claimed(cfg, st, node, log, false)
	defer st.Close()
	p := &Planner{Cfg: cfg, Node: node, Store: st, Holders: holders, Now: time.Now}
	plan, err := p.Plan(ctx, source, entries, skipped)
	if err != nil {
		return nil, err
	}
	if c.apply.On {
		_ = Apply(ctx, st, plan) // each failure is in its action's outcome, and Applied is false
	}
	return plan, nil
}

func (c *cli) holders(ctx context.Context, network string) (Holders, error) {
	ds, closeDS, err := datastore.OpenCalico(ctx, c.calico.Settings())
	if err != nil {
		return Holders{}, err
	}
	defer closeDS()
	// Only Calico's data: the records are read (and written) through the
	// store the plugin uses.
	snap, err := snapshot.Load(ctx, ds, nil, network)
	if err != nil {
		return Holders{}, err
	}
	return HoldersFrom(snap), nil
}

func (c *cli) warn(plan *Plan) {
	for _, s := range plan.Skipped {
		fmt.Fprintf(c.stderr, "safe-ipam adopt: warning: skipped %s: %s\n", s.From, s.Reason)
	}
}

func (p *Plan) exitCode() int {
	switch {
	case p.Applied != nil && !*p.Applied:
		return admin.ExitError
	case p.Pending() || p.EarlyReleases() > 0:
		return admin.ExitAttention
	}
	return admin.ExitOK
}

// WriteText prints one line per action and a summary.
func (p *Plan) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(p.Actions) > 0 {
		fmt.Fprintln(tw, "KIND\tATTACHMENT\tPOD\tADDRESSES\tHANDLE\tOUTCOME\tWHY")
	}
	for _, a := range p.Actions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Kind, a.Attachment, dash(a.Pod), dash(strings.Join(a.IPs, ",")), dash(a.Handle), a.Outcome, a.Why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, p.summary())
	return err
}

func (p *Plan) summary() string {
	counts := map[string]int{}
	for _, a := range p.Actions {
		counts[a.Kind]++
	}
	mode := "dry run (--apply writes)"
	if p.Applied != nil {
		mode = "applied"
		if !*p.Applied {
			mode = "applied with errors"
		}
	}
	return fmt.Sprintf("adopt: network %s, node %s, %s: %d adopt, %d early-release, %d recorded, %d skipped; %s",
		p.Network, p.Node, p.Source, counts[KindAdopt], counts[KindEarlyRelease], counts[KindRecorded], len(p.Skipped), mode)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
