package doctor

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/cninode"
)

// Exit codes of doctor: admin's, named for what they mean here.
const (
	ExitProtected    = admin.ExitOK
	ExitNotProtected = admin.ExitAttention
	ExitError        = admin.ExitError
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
	dirs, out := &admin.NodeDirs{}, admin.NewOutput(10*time.Second)
	cmd := admin.NewCommand("doctor", usage, stderr, dirs, out)
	if code, stop := cmd.ParseOrExit(args); stop {
		return code
	}
	n := cninode.Dirs{BinDir: dirs.BinDir, ConfDir: dirs.ConfDir}
	ctx, cancel := context.WithTimeout(context.Background(), out.Timeout)
	defer cancel()
	r, err := Check(ctx, n)
	if err != nil {
		return cmd.Fail(err)
	}
	_ = out.Print(stdout, r, func(w io.Writer) error { r.WriteTable(w); return nil })
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
