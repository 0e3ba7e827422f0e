// Package admin is the command-line layer every admin subcommand shares:
// one way to parse flags, shared flag groups (the node's config and name
// from --conf, Calico's datastore, the liveness source from
// liveness.Kinds, output, --apply), and the same exit codes. The
// groups take flags and give plain values (datastore.Settings, Place, a
// liveness.Source value); they open no connection. The commands stay thin
// and call the packages that do the work.
package admin

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Exit codes of every admin command.
const (
	ExitOK        = 0 // clean, protected, nothing left to do
	ExitAttention = 1 // findings, refusals, not protected, or a dry run with changes
	ExitError     = 2 // could not tell: unreadable source, unreachable store, bad flags
)

// Group is a set of flags several commands share. Resolve runs after
// parsing, in the order the groups were added, and may read earlier ones.
type Group interface {
	Register(fs *flag.FlagSet)
	Resolve(cmd *Command) error
}

// Command is one subcommand's flag set.
type Command struct {
	Name   string
	Stderr io.Writer
	usage  string
	fs     *flag.FlagSet
	set    map[string]bool
	groups []Group
}

// NewCommand starts a subcommand whose --help prints usage (which ends
// with examples) then the flags, as --flag. A wrong flag or argument is
// reported once, with a hint at the fix, not with the whole usage.
func NewCommand(name, usage string, stderr io.Writer, groups ...Group) *Command {
	c := &Command{Name: name, Stderr: stderr, usage: usage, fs: flag.NewFlagSet(name, flag.ContinueOnError), set: map[string]bool{}, groups: groups}
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {}
	for _, g := range groups {
		g.Register(c.fs)
	}
	return c
}

// PrintHelp writes the usage and every flag, spelled --flag as the docs
// spell them.
func (c *Command) PrintHelp(w io.Writer) {
	fmt.Fprint(w, c.usage)
	fmt.Fprintln(w, "Flags:")
	c.fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  --%s", f.Name)
		if kind != "" {
			fmt.Fprintf(w, " %s", kind)
		}
		fmt.Fprintf(w, "\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !zeroDefault(f.DefValue) {
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func zeroDefault(v string) bool {
	switch v {
	case "", "false", "0", "0s", "[]":
		return true
	}
	return false
}

// Flags is the flag set, for a command's own flags.
func (c *Command) Flags() *flag.FlagSet { return c.fs }

// Set says whether the operator gave the flag.
func (c *Command) Set(name string) bool { return c.set[name] }

// Parse parses args, refuses positional arguments and resolves the groups.
// It returns flag.ErrHelp for -h.
func (c *Command) Parse(args []string) error {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.PrintHelp(c.Stderr)
			return err
		}
		return c.hint(err)
	}
	if c.fs.NArg() > 0 {
		return c.unexpected(c.fs.Arg(0))
	}
	c.fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	for _, g := range c.groups {
		if err := g.Resolve(c); err != nil {
			return err
		}
	}
	return nil
}

// ParseOrExit parses and, when the command must stop, returns its exit
// code: 0 after --help, 2 after a bad flag or argument (reported, with
// where to read more).
func (c *Command) ParseOrExit(args []string) (int, bool) {
	err := c.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return ExitOK, true
	}
	return c.FailUsage(err), true
}

// FailUsage reports a usage error (flags that do not go together) as Fail
// does, then where to read more.
func (c *Command) FailUsage(err error) int {
	code := c.Fail(err)
	fmt.Fprintf(c.Stderr, "Run 'safe-ipam %s --help' for its flags and examples.\n", c.Name)
	return code
}

// hint adds to a flag error what the operator most likely meant.
func (c *Command) hint(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		switch {
		case name == "dry-run" && c.fs.Lookup("apply") != nil:
			return fmt.Errorf("unknown flag --dry-run: %s only shows what it would do unless --apply is given", c.Name)
		case name == "apply" && c.fs.Lookup("dry-run") != nil:
			return fmt.Errorf("unknown flag --apply: %s makes its changes unless --dry-run is given", c.Name)
		}
		return fmt.Errorf("unknown flag --%s", name)
	}
	var name string
	if _, after, ok := strings.Cut(msg, " for flag -"); ok {
		name, _, _ = strings.Cut(after, ":")
	}
	if f := c.fs.Lookup(name); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, isDuration := g.Get().(time.Duration); isDuration {
				return fmt.Errorf("%v (a duration needs a unit: for example --%s=5m, 30s or 1h)", err, name)
			}
		}
	}
	return err
}

// unexpected refuses a positional argument, pointing a path at --conf.
func (c *Command) unexpected(arg string) error {
	if c.fs.Lookup("conf") != nil && (strings.Contains(arg, "/") || strings.HasSuffix(arg, ".conflist") || strings.HasSuffix(arg, ".conf")) {
		return fmt.Errorf("unexpected argument %q: a network config is given as --conf=%s", arg, arg)
	}
	return fmt.Errorf("unexpected argument %q: %s takes flags only", arg, c.Name)
}

// Fail reports err as the command's and returns ExitError.
func (c *Command) Fail(err error) int {
	fmt.Fprintf(c.Stderr, "safe-ipam %s: %v\n", c.Name, err)
	return ExitError
}
