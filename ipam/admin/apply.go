package admin

import "flag"

// Apply is --apply: a command that changes something only shows what it
// would do unless given it.
type Apply struct {
	On bool
	// does is what --apply makes the command do; would, what the dry run
	// prints.
	does, would string
}

// NewApply is the --apply group of a command that does what does says
// with it and prints what would happen without it.
func NewApply(does, would string) *Apply { return &Apply{does: does, would: would} }

// Register adds --apply.
func (a *Apply) Register(fs *flag.FlagSet) {
	fs.BoolVar(&a.On, "apply", false, a.does+" (default: dry run, printing what would "+a.would+")")
}

// Resolve has nothing to check.
func (a *Apply) Resolve(*Command) error { return nil }
