// Package wiring assembles the Guard that runs a CNI verb from a parsed
// plugin config, as the runtime's call needs it: the attachment
// validated, the delegate found, the node and CNI version settled, the
// record store opened, each failure with the CNI error code a runtime
// acts on. The CNI binary's main and `safe-ipam gc` (which releases as the
// GC verb does) wire through it; package guard only runs verbs.
package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/guard"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
)

// Verbs that name no attachment.
const (
	VerbGC     = "GC"
	VerbStatus = "STATUS"
)

// Call is one wiring: the verb, its environment, and the file the config
// came from ("" for stdin), for errors.
type Call struct {
	Verb string
	Env  guard.Env
	In   string
}

// Open validates everything the verb needs, in order, before anything is
// changed: the attachment and CNI_ARGS (4), the delegate binary (50), the
// node name (7) and CNI version (1), the store (11; 50 for STATUS). The
// config itself was validated by config.Parse (6, 7). Close the store
// when done.
func Open(ctx context.Context, cfg *config.Config, c Call, log *slog.Logger) (*guard.Guard, store.Store, error) {
	if c.Verb != VerbGC && c.Verb != VerbStatus {
		if err := guard.CheckEnv(cfg, c.Env); err != nil {
			return nil, nil, err
		}
	}
	d, err := delegate.ResolveTarget(ctx, delegate.Target{Type: cfg.Delegate.Type, BinDir: cfg.Delegate.BinDir, Binary: cfg.Delegate.Binary}, c.Env.Path, cfg.CacheDir)
	if err != nil {
		code := types.ErrInternal
		if errors.Is(err, delegate.ErrMissing) {
			code = types.ErrPluginNotAvailable
		}
		return nil, nil, types.NewError(code, fmt.Sprintf("delegate %s: %v", cfg.Delegate.Type, err), "")
	}
	setup, err := guard.Prepare(cfg, d)
	if err != nil {
		return nil, nil, err
	}
	st, err := opener.Open(ctx, cfg, setup.Node, opener.Options{In: c.In})
	if err != nil {
		code := types.ErrTryAgainLater
		if c.Verb == VerbStatus {
			code = types.ErrPluginNotAvailable
		}
		return nil, nil, types.NewError(code, fmt.Sprintf("record store: %v", err), "")
	}
	return guard.New(cfg, setup, st, d, log), st, nil
}
