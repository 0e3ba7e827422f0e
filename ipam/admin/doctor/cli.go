package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/metrics"
)

// Exit codes of doctor: admin's, named for what they mean here.
const (
	ExitProtected    = admin.ExitOK
	ExitNotProtected = admin.ExitAttention // not installed
	ExitError        = admin.ExitError
	// ExitBroken: installed, but a CNI ADD would fail (or not be
	// protected): the store or Calico's datastore does not answer, the
	// config is read differently than written, ...
	ExitBroken = 3
)

const usage = `Usage: safe-ipam doctor [flags]

Reports whether this node is protected: for each Calico network config,
whether its IPAM goes through safe-ipam, whether safe-ipam's delegate
resolves and speaks a common CNI version, whether the record store answers,
how many records of this node it holds and how many quarantines are tied
to them, and the datastore and node name as Calico infers them. With a
liveness source (%s) it also counts the
stale records: those safe-ipam gc would release. It only reads.
Exit 0 when protected; 1 when not installed; 3 when installed but broken
(a record store or Calico's datastore that does not answer as calico-ipam
reaches it, a config Calico reads differently than written, ...); 2 when
it cannot tell. Stale records do not change the exit code while they
are the next gc run's work (the DaemonSet's gc container releases them);
one last written more than 15 minutes ago means gc is not releasing
them, and gives 3.

With --ready-from ADDR it checks nothing itself: it asks the watch
(install --watch --metrics-addr ADDR, or --probe-socket PATH for ADDR
unix:PATH) for the verdict it keeps at /readyz, and exits 0 when ready, 3
when not, 2 when the watch does not answer. No request reaches a store or
datastore: that is the DaemonSet's readiness probe (docs/operations.md,
"Readiness"). --alive-from ADDR asks /healthz the same way, of the watch
or of gc --every: the liveness probes.

Example: safe-ipam doctor --cri-endpoint unix:///run/containerd/containerd.sock
Example: safe-ipam doctor --ready-from=unix:/run/safe-ipam/watch.sock

`

// Run is `safe-ipam doctor`.
func Run(args []string, stdout, stderr io.Writer) int {
	dirs, out := &admin.NodeDirs{}, admin.NewOutput(10*time.Second)
	live := admin.NewLiveness(func() admin.Place { return admin.Place{} })
	live.ThisNode, live.ExplicitOnly = true, true
	cmd := admin.NewCommand("doctor", fmt.Sprintf(usage, liveness.Say(liveness.NamesContainers, liveness.Kind.FlagName, "or")), stderr, dirs, live, out)
	readyFrom := cmd.Flags().String("ready-from", "", "ask the watch serving probes at `ADDR` (host:port, or unix:PATH for its --probe-socket; e.g. unix:/run/safe-ipam/watch.sock) for its verdict at /readyz instead of checking: the readiness probe")
	aliveFrom := cmd.Flags().String("alive-from", "", "ask the watch or gc --every serving probes at `ADDR` (as --ready-from) whether its loop goes round, at /healthz, instead of checking: the liveness probe")
	if code, stop := cmd.ParseOrExit(args); stop {
		return code
	}
	switch {
	case *readyFrom != "" && *aliveFrom != "":
		return cmd.FailUsage(errors.New("--ready-from and --alive-from exclude each other: one probe per call"))
	case *readyFrom != "":
		return askProbe(*readyFrom, "/readyz", out.Timeout, stdout, stderr)
	case *aliveFrom != "":
		return askProbe(*aliveFrom, "/healthz", out.Timeout, stdout, stderr)
	}
	n := cninode.Dirs{BinDir: dirs.BinDir, ConfDir: dirs.ConfDir}
	ctx, cancel := context.WithTimeout(context.Background(), out.Timeout)
	defer cancel()
	var src liveness.Source
	if live.Explicit() {
		src = live.Source()
	}
	r, err := Check(ctx, n, src)
	if err != nil {
		return cmd.Fail(err)
	}
	_ = out.Print(stdout, r, func(w io.Writer) error { r.WriteTable(w); return nil })
	switch {
	case r.Protected:
		return ExitProtected
	case r.Installed:
		return ExitBroken
	}
	return ExitNotProtected
}

// WriteTable prints the report for a terminal.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tNETWORK\tIPAM\tPROTECTED\tDELEGATE\tSTORE\tRECORDS\tSTALE\tQUARANTINES\tDATASTORE\tNODE")
	for _, n := range r.Networks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.File, dash(n.Network), dash(n.IPAM), yesNo(n.Protected),
			n.delegateCell(), n.storeCell(), n.recordsCell(), n.staleCell(), n.quarantinesCell(), dash(n.Datastore), dash(n.Node))
	}
	tw.Flush()
	fmt.Fprintf(w, "calico-ipam in %s: %s\n", r.BinDir, r.CalicoIPAM)
	if r.Build != "" {
		fmt.Fprintf(w, "the runtime runs: %s\n", r.Build)
	} else if r.BuildError != "" {
		fmt.Fprintf(w, "warning: the runtime's safe-ipam build does not say its version: %s\n", r.BuildError)
	}
	for _, n := range r.Networks {
		if n.Store == nil {
			continue
		}
		switch {
		case n.Store.StaleError != "":
			fmt.Fprintf(w, "stale records of %s: not judged: %s\n", n.Network, n.Store.StaleError)
		case n.Store.StaleBy != "" && n.Store.Stale > 0:
			fmt.Fprintf(w, "stale records of %s: %d not listed by %s; safe-ipam gc releases them\n", n.Network, n.Store.Stale, n.Store.StaleBy)
		}
		if n.Store.Exposure != "" {
			fmt.Fprintf(w, "warning: record store of %s: %s\n", n.Network, n.Store.Exposure)
		}
		if hosts := n.Store.OtherHosts; len(hosts) > 0 {
			fmt.Fprintf(w, "warning: records of %s on node %s were written by this host and by %s: two machines under one Calico node name (a stale /var/lib/calico/nodename?); gc keeps the other host's records\n",
				n.Network, dash(n.Node), strings.Join(hosts, ", "))
		}
		if n.Failing != nil {
			fmt.Fprintf(w, "warning: network %s: a CNI call failed and none has succeeded since: %s\n", n.Network, n.Failing)
		}
		if c := n.Calico; c != nil && c.Exposure != "" {
			fmt.Fprintf(w, "warning: Calico's datastore of %s (%s): %s\n", n.Network, c.Transport, c.Exposure)
		}
		if c := n.Claims; c != nil {
			c.writeText(w, n.Network)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
	switch {
	case r.Protected:
		fmt.Fprintln(w, "doctor: protected")
	case r.Installed:
		fmt.Fprintln(w, "doctor: NOT protected: installed but broken (see the problems above)")
	default:
		fmt.Fprintln(w, "doctor: NOT protected: not installed")
	}
}

func (n Network) delegateCell() string {
	switch {
	case n.Delegate == nil:
		return "-"
	case n.Delegate.Error != "":
		return "error"
	}
	return fmt.Sprintf("%s (CNI %s of %s)", n.Delegate.Path, n.Delegate.Speaks, strings.Join(n.Delegate.Versions, ","))
}

func (n Network) storeCell() string {
	switch {
	case n.Store == nil:
		return "-"
	case !n.Store.Answers:
		return n.Store.Type + " " + n.Store.Where + ": no answer"
	}
	return n.Store.Type + " " + n.Store.Where + ": ok"
}

func (n Network) recordsCell() string {
	if n.Store == nil || !n.Store.Answers {
		return "-"
	}
	return fmt.Sprint(n.Store.Records)
}

// staleCell is "-" when no liveness source judged, "?" when it could not.
func (n Network) staleCell() string {
	switch {
	case n.Store == nil || !n.Store.Answers || (n.Store.StaleBy == "" && n.Store.StaleError == ""):
		return "-"
	case n.Store.StaleError != "":
		return "?"
	}
	return fmt.Sprint(n.Store.Stale)
}

func (n Network) quarantinesCell() string {
	if n.Store == nil || !n.Store.Answers {
		return "-"
	}
	return fmt.Sprint(n.Store.Quarantines)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// askProbe is --ready-from and --alive-from: a verdict the watch or gc
// keeps, read from its endpoint (the loopback port, or its probe socket),
// with no request to any store or datastore.
func askProbe(addr, path string, timeout time.Duration, stdout, stderr io.Writer) int {
	client, base := metrics.ProbeClient(addr, timeout)
	resp, err := client.Get(base + path)
	if err != nil {
		fmt.Fprintf(stderr, "safe-ipam doctor: %s does not answer: %v\n", addr, err)
		return ExitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		fmt.Fprintf(stdout, "%s", body)
		return ExitProtected
	case http.StatusServiceUnavailable:
		fmt.Fprintf(stdout, "%s", body)
		return ExitBroken
	}
	fmt.Fprintf(stderr, "safe-ipam doctor: %s answers %s\n", addr, resp.Status)
	return ExitError
}
