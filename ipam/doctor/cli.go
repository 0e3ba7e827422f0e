package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/install"
)

// Exit codes of doctor.
const (
	ExitProtected    = 0
	ExitNotProtected = 1
	ExitError        = 2
)

const usage = `usage: safe-ipam doctor [flags]

Reports whether this node is protected: for each Calico network config,
whether its IPAM goes through safe-ipam, whether safe-ipam's delegate
resolves and speaks a common CNI version, whether the record store answers
and how many records it holds, and the datastore and node name as Calico
infers them. It only reads. Exit 0 when protected, 1 when not, 2 on error.

`

// Run is `safe-ipam doctor`.
func Run(args []string, stdout, stderr io.Writer) int {
	var n install.Node
	var asJSON bool
	var timeout time.Duration
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&n.BinDir, "cni-bin-dir", install.DefaultBinDir, "the node's CNI bin dir")
	fs.StringVar(&n.ConfDir, "cni-conf-dir", install.DefaultConfDir, "the node's CNI config dir")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.DurationVar(&timeout, "timeout", 10*time.Second, "overall time limit")
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitProtected
		}
		return ExitError
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "safe-ipam doctor: unexpected argument %q\n", fs.Arg(0))
		return ExitError
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := Check(ctx, n)
	if err != nil {
		fmt.Fprintln(stderr, "safe-ipam doctor:", err)
		return ExitError
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
	} else {
		r.WriteTable(stdout)
	}
	if !r.Protected {
		return ExitNotProtected
	}
	return ExitProtected
}

// WriteTable prints the report for a terminal.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tNETWORK\tIPAM\tPROTECTED\tDELEGATE\tSTORE\tRECORDS\tDATASTORE\tNODE")
	for _, n := range r.Networks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.File, dash(n.Network), dash(n.IPAM), yesNo(n.Protected),
			n.delegateCell(), n.storeCell(), n.recordsCell(), dash(n.Datastore), dash(n.Node))
	}
	tw.Flush()
	fmt.Fprintf(w, "calico-ipam in %s: %s\n", r.BinDir, r.CalicoIPAM)
	for _, p := range r.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
	if r.Protected {
		fmt.Fprintln(w, "doctor: protected")
	} else {
		fmt.Fprintln(w, "doctor: NOT protected")
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
