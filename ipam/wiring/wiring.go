// Package wiring assembles the Guard that runs a CNI verb from a parsed
// plugin config, as the runtime's call needs it: the attachment
// validated, the delegate found, the node and CNI version settled, the
// record store opened, each failure with the CNI error code a runtime
// acts on. The CNI binary's main and `safe-ipam gc` (which releases as the
// GC verb does) wire through it; package guard only runs verbs.
package wiring

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
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
// changed: the attachment and CNI_ARGS (4), the delegate binary (50; 7
// outside CNI_PATH without outsideCNIPath), the node name (7) and CNI
// version (1), the store (11; 50 for STATUS). The config itself was
// validated by config.Parse (6, 7). Close the store when done.
func Open(ctx context.Context, cfg *config.Config, c Call, log *slog.Logger) (*guard.Guard, store.Store, error) {
	if c.Verb != VerbGC && c.Verb != VerbStatus {
		if err := guard.CheckEnv(cfg, c.Env); err != nil {
			return nil, nil, err
		}
	}
	d, err := delegate.ResolveTarget(ctx, delegate.TargetOf(cfg.Delegate), c.Env.Path, cfg.CacheDir)
	if err != nil {
		code := types.ErrInternal
		switch {
		case errors.Is(err, delegate.ErrMissing):
			code = types.ErrPluginNotAvailable
		case errors.Is(err, delegate.ErrOutsideCNIPath):
			code = types.ErrInvalidNetworkConfig
		}
		return nil, nil, types.NewError(code, fmt.Sprintf("delegate %s: %v", cfg.Delegate.Type, err), "")
	}
	setup, err := guard.Prepare(cfg, d)
	if err != nil {
		return nil, nil, err
	}
	warnExposure(cfg, c.In, log)
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

// warnExposure logs how the record store's etcd is exposed (plain text,
// or no CA file; see etcdconn.Exposure), once per node and finding: a
// mark in the cache dir says it was logged. A mark that cannot be made
// logs it every time rather than never.
func warnExposure(cfg *config.Config, in string, log *slog.Logger) {
	if cfg.Store.Type != config.StoreEtcd {
		return
	}
	why := etcdconn.Exposure(cfg.Store.Endpoints, cfg.StoreTLS(in))
	if why == "" {
		return
	}
	if cfg.CacheDir != "" {
		sum := sha256.Sum256([]byte(why))
		_ = os.MkdirAll(cfg.CacheDir, 0o700)
		f, err := os.OpenFile(filepath.Join(cfg.CacheDir, "exposure-"+hex.EncodeToString(sum[:8])), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return
		}
		if err == nil {
			f.Close()
		}
	}
	log.Warn("the record store's etcd is exposed", "why", why)
}
