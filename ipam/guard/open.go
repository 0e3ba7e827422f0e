package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
)

// Verbs that name no attachment.
const (
	VerbGC     = "GC"
	VerbStatus = "STATUS"
)

// Open validates everything a verb needs, in order, before anything is
// changed: config (6, 7), the attachment and CNI_ARGS (4), the delegate
// binary (50), the node name (7) and CNI version (1), the store (11; 50
// for STATUS).
// Close the Guard when done.
func Open(ctx context.Context, verb string, stdin []byte, env Env) (*Guard, error) {
	cfg, err := config.Parse(stdin)
	if err != nil {
		return nil, err
	}
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", verb, "container", env.ContainerID, "ifname", env.IfName)
	g, err := open(ctx, verb, cfg, settingsOf(cfg), env, log)
	if err != nil {
		log.Error("refused", "error", err)
		closeLog()
		return nil, err
	}
	g.closeLog = closeLog
	return g, nil
}

func open(ctx context.Context, verb string, cfg *config.Config, settings tlsSettings, env Env, log *slog.Logger) (*Guard, error) {
	if verb != VerbGC && verb != VerbStatus {
		probe := &Guard{cfg: cfg}
		if _, _, err := probe.attachment(env); err != nil {
			return nil, err
		}
	}
	d, err := delegate.ResolveTarget(ctx, delegate.Target{Type: cfg.Delegate.Type, BinDir: cfg.Delegate.BinDir, Binary: cfg.Delegate.Binary}, env.Path, cfg.CacheDir)
	if err != nil {
		code := types.ErrInternal
		if errors.Is(err, delegate.ErrMissing) {
			code = types.ErrPluginNotAvailable
		}
		return nil, types.NewError(code, fmt.Sprintf("delegate %s: %v", cfg.Delegate.Type, err), "")
	}
	node, version, err := prepare(cfg, d)
	if err != nil {
		return nil, err
	}
	st, err := openStore(ctx, cfg.Store, settings, node)
	if err != nil {
		code := types.ErrTryAgainLater
		if verb == VerbStatus {
			code = types.ErrPluginNotAvailable
		}
		return nil, types.NewError(code, fmt.Sprintf("record store: %v", err), "")
	}
	return newGuard(cfg, node, version, st, d, log), nil
}

func openStore(ctx context.Context, s config.Store, settings tlsSettings, node string) (store.Store, error) {
	if s.Type == config.StoreEtcd {
		return etcdstore.Open(ctx, etcdstore.Config{
			Endpoints: s.Endpoints, Prefix: s.Prefix, Node: node,
			TLS: etcdconn.TLSFiles{
				Cert: etcdconn.File{Path: s.CertFile, Setting: settings.cert},
				Key:  etcdconn.File{Path: s.KeyFile, Setting: settings.key},
				CA:   etcdconn.File{Path: s.CAFile, Setting: settings.ca},
			},
			DialTimeout: s.DialTimeout.Std(),
		})
	}
	return filestore.Open(s.Dir)
}

// tlsSettings name the settings the store's TLS files came from, so that
// an error about a file says which setting to fix.
type tlsSettings struct{ cert, key, ca string }

// Close releases the store connection and the log file.
func (g *Guard) Close() {
	if g.store != nil {
		g.store.Close()
	}
	if g.closeLog != nil {
		g.closeLog()
	}
}
