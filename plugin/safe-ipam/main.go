// Command safe-ipam is the CNI binary: an IPAM plugin that fronts
// calico-ipam and makes DEL safe, so no DEL can release addresses by pod
// name. It links only what a CNI call needs (the admin commands bring the
// Kubernetes and CRI clients, whose package init every CNI call would
// pay). Run without CNI_COMMAND it answers version and help itself and
// executes safe-ipam-admin from its own directory for the other admin
// commands.
package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/guard"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
	"github.com/safe-ipam/safe-ipam/ipam/wiring"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

var supported = version.PluginSupports(about.CNIVersions...)

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
	return c.withGuard(wiring.VerbGC, args, func(ctx context.Context, g *guard.Guard, env guard.Env) error {
		return g.GC(ctx, env, args.StdinData)
	})
}

func (c cni) cmdStatus(args *skel.CmdArgs) error {
	return c.withGuard(wiring.VerbStatus, args, func(ctx context.Context, g *guard.Guard, env guard.Env) error {
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
	cfg, err := config.ParseOnNode(args.StdinData, ownDir())
	if err != nil {
		return err
	}
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", verb, "container", env.ContainerID, "ifname", env.IfName)
	defer closeLog()
	ctx, cancel := context.WithTimeout(ctx, cfg.VerbTimeout)
	defer cancel()
	g, st, err := wiring.Open(ctx, cfg, wiring.Call{Verb: verb, Env: env}, log)
	if err != nil {
		err = guard.PastDeadline(ctx, verb, cfg.VerbTimeout, err)
		log.Error("refused", "error", err)
		return err
	}
	defer st.Close()
	c.trace.Mark(logging.MarkOpened)
	g.At = crashPoint
	defer c.trace.Mark(logging.MarkRan)
	err = run(ctx, g, env)
	if ctx.Err() != nil && err != nil {
		err = guard.PastDeadline(ctx, verb, cfg.VerbTimeout, err)
		log.Error("stopped at the deadline", "error", err)
	}
	return err
}

// ownDir is the directory safe-ipam runs from, where install keeps the
// node settings ("" when it cannot tell: none are read).
func ownDir() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Dir(self)
}
