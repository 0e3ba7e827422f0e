// Command safe-ipam-admin holds safe-ipam's admin commands (audit, repair,
// adopt, gc, install, uninstall, doctor), which the CNI binary hands to
// it. It is not a CNI plugin itself (package builds says why there are
// three builds).
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/adopt"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/detect"
	"github.com/safe-ipam/safe-ipam/ipam/admin/doctor"
	"github.com/safe-ipam/safe-ipam/ipam/admin/gc"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/admin/repair"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	if os.Getenv("CNI_COMMAND") != "" {
		// A runtime pointed at this binary: say which one it wants, in the
		// form a runtime reports.
		_ = types.NewError(types.ErrPluginNotAvailable, builds.AdminBinary+" is not a CNI plugin",
			"the runtime must run "+builds.CNIBinary+", which hands admin commands to "+builds.AdminBinary).Print()
		os.Exit(1)
	}
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"help"}
	}
	os.Exit(dispatch(args))
}

func dispatch(args []string) int {
	if about.Builtin(args[0]) {
		about.Answer(os.Stdout, args[0], builds.AdminBinary, Version)
		return 0
	}
	// Everything a command prints is for a person (or JSON): control
	// characters from its data must not reach the terminal. That includes
	// what reaches os.Stderr from elsewhere: the delegate's log lines that
	// gc and uninstall relay, a library's.
	done, err := filterStderr()
	if err != nil {
		fmt.Fprintf(os.Stderr, "safe-ipam: %v\n", err)
		return 2
	}
	defer done()
	stdout, stderr := admin.ForPeople(os.Stdout), os.Stderr
	if run, ok := runners[args[0]]; ok {
		return run(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "safe-ipam: unknown command %q\n\n%s", args[0], about.Usage)
	return 2
}

// runners run about.Commands, one for each (TestEveryCommandRuns).
var runners = map[string]func(args []string, stdout, stderr io.Writer) int{
	"audit":  audit.Run,
	"repair": repair.Run,
	"adopt":  adopt.Run,
	"gc":     gc.Run,
	"install": func(args []string, stdout, stderr io.Writer) int {
		return install.RunInstall(args, stdout, stderr, (&nodeCheck{}).check)
	},
	"uninstall": install.RunUninstall,
	"doctor":    doctor.Run,
	"detect":    detect.Run,
}

// filterStderr makes os.Stderr a pipe whose every byte goes through
// admin.ForPeople to the process's stderr; done closes it, waits for the
// last bytes and puts os.Stderr back.
func filterStderr() (done func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("filtering what it prints: %w", err)
	}
	orig := os.Stderr
	os.Stderr = w
	copied := make(chan struct{})
	go func() {
		if _, err := io.Copy(admin.ForPeople(orig), r); err != nil {
			// A stderr that cannot be written (a full disk, a closed
			// terminal) must not block the command once the pipe fills.
			_, _ = io.Copy(io.Discard, r)
		}
		close(copied)
	}()
	return func() {
		os.Stderr = orig
		w.Close()
		<-copied
		r.Close()
	}, nil
}

// nodeCheck is doctor's answer for the watch: CheckLocal often, a full
// check now and then (remote), through a memo the watch keeps, so that a
// full check reads again only what can have changed.
type nodeCheck struct{ memo doctor.Memo }

func (c *nodeCheck) check(ctx context.Context, n install.Node, remote bool) (install.Verdict, error) {
	var r *doctor.Report
	var err error
	if remote {
		r, err = c.memo.Check(ctx, n.Dirs())
	} else {
		r, err = doctor.CheckLocal(ctx, n.Dirs())
	}
	if err != nil {
		return install.Verdict{}, err
	}
	v := install.Verdict{Protected: r.Protected, Unanswered: r.Unanswered(), Problems: r.Problems}
	for _, net := range r.Networks {
		if f := net.Failing; f != nil && (v.Failing == nil || f.At.After(v.Failing.At)) {
			v.Failing = f
		}
		if net.Store != nil && net.Store.Answers {
			v.Stores = append(v.Stores, install.StoreCount{Network: net.Network, Records: net.Store.Records, Quarantines: net.Store.Quarantines})
		}
	}
	return v, nil
}
