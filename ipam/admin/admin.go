// Package admin is the command-line layer every admin subcommand shares:
// one way to parse flags, shared flag groups (Calico's datastore and node
// from --conf, the liveness source, output), and the same exit codes. The
// groups take flags and give plain values (datastore.Settings, Place, a
// liveness.Source value); they open no connection. The commands stay thin
// and call the packages that do the work.
package admin

import (
	"errors"
	"flag"
	"fmt"
	"io"
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
	fs     *flag.FlagSet
	set    map[string]bool
	groups []Group
}

// NewCommand starts a subcommand whose -h prints usage then the flags.
func NewCommand(name, usage string, stderr io.Writer, groups ...Group) *Command {
	c := &Command{Name: name, Stderr: stderr, fs: flag.NewFlagSet(name, flag.ContinueOnError), set: map[string]bool{}, groups: groups}
	c.fs.SetOutput(stderr)
	c.fs.Usage = func() { fmt.Fprint(stderr, usage); c.fs.PrintDefaults() }
	for _, g := range groups {
		g.Register(c.fs)
	}
	return c
}

// Flags is the flag set, for a command's own flags.
func (c *Command) Flags() *flag.FlagSet { return c.fs }

// Set says whether the operator gave the flag.
func (c *Command) Set(name string) bool { return c.set[name] }

// Parse parses args, refuses positional arguments and resolves the groups.
// It returns flag.ErrHelp for -h.
func (c *Command) Parse(args []string) error {
	if err := c.fs.Parse(args); err != nil {
		return err
	}
	if c.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", c.fs.Arg(0))
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
// code: 0 after -h, 2 after a bad flag (already reported).
func (c *Command) ParseOrExit(args []string) (int, bool) {
	err := c.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return ExitOK, true
	}
	return c.Fail(err), true
}

// Fail reports err as the command's and returns ExitError.
func (c *Command) Fail(err error) int {
	fmt.Fprintf(c.Stderr, "safe-ipam %s: %v\n", c.Name, err)
	return ExitError
}
