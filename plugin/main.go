// Command safe-ipam is a CNI IPAM plugin that fronts calico-ipam and makes
// DEL safe: no DEL can release addresses by pod name. Run without
// CNI_COMMAND it offers admin subcommands.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/safe-ipam/safe-ipam/ipam/adopt"
	"github.com/safe-ipam/safe-ipam/ipam/audit"
	"github.com/safe-ipam/safe-ipam/ipam/doctor"
	"github.com/safe-ipam/safe-ipam/ipam/gc"
	"github.com/safe-ipam/safe-ipam/ipam/guard"
	"github.com/safe-ipam/safe-ipam/ipam/install"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

var supported = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

func main() {
	c := cni{trace: logging.NewTrace()} // first: exec and init are done
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(runAdmin(os.Args[1:]))
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: c.cmdAdd, Del: c.cmdDel, Check: c.cmdCheck, GC: c.cmdGC, Status: c.cmdStatus},
		supported, "safe-ipam "+Version+": CNI IPAM in front of calico-ipam; run 'safe-ipam --help' for admin commands")
}

func (c cni) cmdAdd(args *skel.CmdArgs) error {
	return c.withGuard("ADD", args, func(ctx context.Context, g *guard.Guard, env guard.Env) error {
		res, err := g.Add(ctx, env)
		if err != nil {
			return err
		}
		return types.PrintResult(res, res.Version())
	})
}

func (c cni) cmdDel(args *skel.CmdArgs) error {
	return c.withGuard("DEL", args, func(ctx context.Context, g *guard.Guard, env guard.Env) error {
		return g.Del(ctx, env)
	})
}

func (c cni) cmdCheck(args *skel.CmdArgs) error {
	return c.withGuard("CHECK", args, func(ctx context.Context, g *guard.Guard, env guard.Env) error {
		return g.Check(ctx, env)
	})
}

func (c cni) cmdGC(args *skel.CmdArgs) error {
	return c.withGuard(guard.VerbGC, args, func(ctx context.Context, g *guard.Guard, env guard.Env) error {
		return g.GC(ctx, env, args.StdinData)
	})
}

func (c cni) cmdStatus(args *skel.CmdArgs) error {
	return c.withGuard(guard.VerbStatus, args, func(ctx context.Context, g *guard.Guard, env guard.Env) error {
		return g.Status(ctx, env)
	})
}

// cni runs the CNI verbs; trace, when SAFE_IPAM_TRACE is set, records
// when each phase ended for `make bench`.
type cni struct {
	trace *logging.Trace
}

func (c cni) withGuard(verb string, args *skel.CmdArgs, run func(context.Context, *guard.Guard, guard.Env) error) error {
	ctx := logging.WithTrace(context.Background(), c.trace)
	defer c.trace.Write()
	env := guard.Env{ContainerID: args.ContainerID, NetNS: args.Netns, IfName: args.IfName, Args: args.Args, Path: args.Path}
	g, err := guard.Open(ctx, verb, args.StdinData, env)
	if err != nil {
		return err
	}
	defer g.Close()
	c.trace.Mark(logging.MarkOpened)
	g.At = crashPoint
	defer c.trace.Mark(logging.MarkRan)
	return run(ctx, g, env)
}

func runAdmin(args []string) int {
	switch args[0] {
	case "version", "--version":
		fmt.Printf("safe-ipam %s (CNI %v)\n", Version, supported.SupportedVersions())
		return 0
	case "audit":
		return audit.Run(args[1:], os.Stdout, os.Stderr, false)
	case "repair":
		return audit.Run(args[1:], os.Stdout, os.Stderr, true)
	case "adopt":
		return adopt.Run(args[1:], os.Stdout, os.Stderr)
	case "gc":
		return gc.Run(args[1:], os.Stdout, os.Stderr)
	case "install":
		return install.RunInstall(args[1:], os.Stdout, os.Stderr)
	case "uninstall":
		return install.RunUninstall(args[1:], os.Stdout, os.Stderr)
	case "doctor":
		return doctor.Run(args[1:], os.Stdout, os.Stderr)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "safe-ipam: unknown command %q\n\n%s", args[0], usage)
	return 2
}

const usage = `safe-ipam: a CNI IPAM plugin in front of calico-ipam that makes DEL safe.

As a CNI plugin it is run by the container runtime with CNI_COMMAND set
(ADD, DEL, CHECK, GC, STATUS, VERSION) and its config on stdin.

Admin commands (CNI_COMMAND unset):
  safe-ipam audit       report pod-name handles, early releases, duplicates,
                        leaks, orphan records and inconsistencies in Calico's
                        etcd data (safe-ipam audit -h for flags)
  safe-ipam repair      plan, and with --apply make, only proven fixes
  safe-ipam adopt       give the pods that already run on this node (from the
                        CNI cache, --live or --cri-endpoint) records, with the
                        handle Calico holds their addresses under; reports
                        early releases (--conf FILE, --apply)
  safe-ipam gc          CNI GC where the runtime sends none: release this
                        node's records that the runtime (--cri-endpoint) or
                        another liveness source does not list (--apply)
  safe-ipam install     put safe-ipam in front of calico-ipam on this node
                        (--mode takeover|conflist, --dry-run, --watch to keep
                        it there while calico-node re-installs itself)
  safe-ipam uninstall   take it off again, restoring what install replaced
  safe-ipam doctor      is this node protected? exit 0 yes, 1 no, 2 error
  safe-ipam version     print the version and the CNI versions it speaks
  safe-ipam help        this text
`
