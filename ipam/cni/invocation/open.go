// Package invocation opens one invocation of safe-ipam's CNI verbs: the
// runtime's call validated, its delegate found, the node and CNI version
// settled, Calico's data and the record store opened, each failure with
// the CNI error code a runtime acts on, and the Guard that runs the verb
// built over them. The CNI binary's verbs run through Verbs; `safe-ipam
// gc` and uninstall, which release as the GC verb does, call Open.
package invocation

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
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/cni/lookup"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Verbs that name no attachment.
const (
	VerbGC     = "GC"
	VerbStatus = "STATUS"
)

// Call is one invocation as it is opened: the verb, its CNI environment,
// the parsed config and the file it came from ("" for stdin, for errors
// and the paths it names), where the verb logs, and the backends of the
// build that runs it.
type Call struct {
	Verb     string
	Env      delegate.Env
	Config   *config.Config
	In       string
	Log      *slog.Logger
	Backends Backends
}

// Backends open what a call reaches besides the delegate: the record
// store and Calico's datastore. Only builds that link the etcd client
// reach etcd themselves (backends.Full; why: package builds). The CNI
// binary's lean build (Lean) opens the file store only, hands a call
// whose record store is etcd to the build beside it that has the client
// (Verbs.HandOverTo), and reads Calico's etcd, on the verbs' rare paths,
// through that build too (lookup.Relayed).
type Backends struct {
	// Store opens the record store cfg names for node's records, to
	// write; in names the file cfg came from, for errors.
	Store func(ctx context.Context, cfg *config.Config, node, in string) (store.Store, error)
	// EtcdStore says whether Store opens an etcd store.
	EtcdStore bool
	// CalicoEtcd reads Calico's etcd datastore.
	CalicoEtcd func(c config.CalicoSettings, warn lookup.Warn) lookup.Reader
}

// Lean are the backends of the CNI binary's lean build: the file store,
// and Calico's etcd read through the etcd build beside the binary.
func Lean() Backends {
	return Backends{Store: openFileStore, CalicoEtcd: func(c config.CalicoSettings, warn lookup.Warn) lookup.Reader {
		return lookup.NewRelayed(filepath.Join(ownDir(), builds.EtcdBinary), c, warn)
	}}
}

// openFileStore is the lean build's store: Open has refused an etcd one.
func openFileStore(_ context.Context, cfg *config.Config, _, _ string) (store.Store, error) {
	return filestore.Open(cfg.Store.Dir)
}

// calico is the reader of the datastore cfg names.
func (b Backends) calico(cfg *config.Config, warn lookup.Warn) lookup.Reader {
	if cfg.Calico.Datastore() == config.DatastoreEtcd {
		return b.CalicoEtcd(cfg.Calico, warn)
	}
	return lookup.New(cfg.Calico, warn)
}

// Opened is a call ready to run: the Guard over its store and Calico's
// data. Close it when done.
type Opened struct {
	Guard  *guard.Guard
	Store  store.Store
	calico lookup.Reader
}

// Close closes the store and whatever a read of Calico's data connected.
func (o *Opened) Close() error {
	return errors.Join(o.Store.Close(), o.calico.Close())
}

// Open validates everything the verb needs, in order, before anything is
// changed: the attachment and CNI_ARGS (4), the delegate binary (50; 7
// outside CNI_PATH without outsideCNIPath), the node name (7) and CNI
// version (1), the store (11; 50 for STATUS). The config itself was
// validated by config.Parse (6, 7). Calico's data is read only by the
// verbs that need it, so opening it connects to nothing.
func Open(ctx context.Context, c Call) (*Opened, error) {
	cfg := c.Config
	if c.Backends.Store == nil || (cfg.Store.Type == config.StoreEtcd && !c.Backends.EtcdStore) {
		// A caller's mistake, not the runtime's: the CNI binary hands such
		// a call over before it opens anything.
		return nil, types.NewError(types.ErrInternal, "this build of safe-ipam does not open the etcd store the config names", "")
	}
	if c.Verb != VerbGC && c.Verb != VerbStatus {
		if _, _, err := guard.AttachmentOf(cfg.Network, c.Env); err != nil {
			return nil, err
		}
	}
	d, err := resolveDelegate(ctx, cfg, c.Env.Path)
	if err != nil {
		return nil, err
	}
	node, err := cfg.Node()
	if err != nil {
		return nil, err
	}
	version, err := delegate.Negotiate(cfg.CNIVersion, d.Versions)
	if err != nil {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("delegate %s: %v", d.Type, err), "")
	}
	warnExposure(cfg.CacheDir, c.Log, "the record store's etcd", storeExposure(cfg, c.In))
	st, err := c.Backends.Store(ctx, cfg, node, c.In)
	if err != nil {
		code := types.ErrTryAgainLater
		if c.Verb == VerbStatus {
			code = types.ErrPluginNotAvailable
		}
		return nil, types.NewError(code, fmt.Sprintf("record store: %v", err), "")
	}
	st = Claimed(cfg, st, node, c.Log, c.Verb == "ADD" || c.Verb == "DEL")
	calico := c.Backends.calico(cfg, func(transport, why string) { warnExposure(cfg.CacheDir, c.Log, transport, why) })
	g := guard.New(guard.Parts{Config: cfg, Node: node, Version: version, Delegate: d, Store: st, Calico: calico, Log: c.Log})
	return &Opened{Guard: g, Store: st, calico: calico}, nil
}

// Claimed gives st, node's record store opened for cfg, the cluster-wide
// claims cfg keeps (claims.ForConfig), judged by the rulebook: the CNI
// verbs open their store so, and so do the admin commands that write
// records (adopt, repair), whose commits then claim and whose forgets
// release as a verb's do. hot is a pod's ADD or DEL.
func Claimed(cfg *config.Config, st store.Store, node string, log *slog.Logger, hot bool) store.Store {
	return claims.ForConfig(cfg, st, node, claims.Options{Warn: claimWarning(cfg, log), MayForget: mayForget(node), Hot: hot,
		Exposed: func(why string) { warnExposure(cfg.CacheDir, log, "the Kubernetes API", why) }, At: claimsAt()})
}

// claimsAt is the crash tests' hook at the claims' points, which are
// guard.Steps of their own (nil outside builds with -tags crashpoints).
func claimsAt() func(claims.Point) {
	at := CrashPoint
	if at == nil {
		return nil
	}
	return func(p claims.Point) { at(guard.Step(p)) }
}

// The file store is the node store claims.Wrap gives the claims to (it
// asserts that at run time, and would leave a store without claims).
var _ claims.Local = (*filestore.Store)(nil)

// claimWarning logs why a claim could not be made: once per node when the
// cluster serves none to this node (a setting, not this call's trouble:
// the mark is keyed by that reason alone, never the call's address),
// else each time.
func claimWarning(cfg *config.Config, log *slog.Logger) func(string, error) {
	return func(msg string, err error) {
		if errors.Is(err, claims.ErrNotServed) {
			warnOnce(cfg.CacheDir, log, "no cluster-wide claims: this node fences its own records only",
				"the API server serves no AddressClaims, or Calico's CNI identity may not use them (safe-ipam doctor says which)")
			return
		}
		log.Warn(msg, "error", err)
	}
}

// mayForget is the rulebook's judgment of a claim of this machine's that
// a commit meets on its address (rulebook.Claim): taken over only when no
// record of this machine holds it, no ADD of its attachment still runs,
// and it is older than the grace.
func mayForget(node string) func(*claims.Claim, *record.Record) bool {
	host := record.ThisHost()
	return func(cl *claims.Claim, rec *record.Record) bool {
		return rulebook.Claim(rulebook.ClaimCase{Node: cl.Node, Host: cl.Host, Self: node, SelfHost: host,
			Addr: cl.Addr, Record: rec, Age: time.Since(cl.Created)}).Release
	}
}

// resolveDelegate finds the delegate the config names in cniPath (or its
// binDir), with the code a runtime acts on: 50 when it is missing, 7 when
// it is outside CNI_PATH without leave.
func resolveDelegate(ctx context.Context, cfg *config.Config, cniPath string) (*delegate.Delegate, error) {
	d, err := delegate.ResolveTarget(ctx, delegate.TargetOf(cfg.Delegate), cniPath, cfg.CacheDir)
	if err == nil {
		return d, nil
	}
	code := types.ErrInternal
	switch {
	case errors.Is(err, delegate.ErrMissing):
		code = types.ErrPluginNotAvailable
	case errors.Is(err, delegate.ErrOutsideCNIPath):
		code = types.ErrInvalidNetworkConfig
	}
	return nil, types.NewError(code, fmt.Sprintf("delegate %s: %v", cfg.Delegate.Type, err), "")
}

// storeExposure says how the record store's etcd is exposed (plain
// text, or no CA file; see etcdtls.Exposure), or "".
func storeExposure(cfg *config.Config, in string) string {
	if cfg.Store.Type != config.StoreEtcd {
		return ""
	}
	return etcdtls.Exposure(cfg.Store.Endpoints, cfg.StoreTLS(in))
}

// warnExposure logs how a transport safe-ipam uses is exposed (the record
// store's etcd, Calico's etcd, the Kubernetes API), once per node and
// finding.
func warnExposure(cacheDir string, log *slog.Logger, transport, why string) {
	if why != "" {
		warnOnce(cacheDir, log, transport+" is exposed", why)
	}
}

// warnOnce logs msg for why once per node: a mark in the cache dir says
// it was logged. A mark that cannot be made logs it every time rather
// than never.
func warnOnce(cacheDir string, log *slog.Logger, msg, why string) {
	if cacheDir != "" {
		sum := sha256.Sum256([]byte(msg + "\x00" + why))
		_ = os.MkdirAll(cacheDir, 0o700)
		f, err := os.OpenFile(filepath.Join(cacheDir, "exposure-"+hex.EncodeToString(sum[:8])), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return
		}
		if err == nil {
			f.Close()
		}
	}
	log.Warn(msg, "why", why)
}
