// Package guard implements safe-ipam's verbs: it records which attachment
// owns which addresses and makes every handle the delegate touches
// container-keyed, so no DEL can release by pod name.
package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// Env is the CNI environment of one invocation.
type Env struct {
	ContainerID string
	NetNS       string
	IfName      string
	Args        string // CNI_ARGS as received
	Path        string // CNI_PATH
}

// Step names a point between two effects of a verb, where a crash can
// happen. Tests stop the process at each of them.
type Step string

// The steps, in the order each verb reaches them.
const (
	AddStart          Step = "add-start"
	AddReserved       Step = "add-reserved"
	AddRecovered      Step = "add-recovered"
	AddDelegated      Step = "add-delegated"
	AddFailedReleased Step = "add-failed-released"
	AddCommitted      Step = "add-committed"
	DelStart          Step = "del-start"
	DelMarked         Step = "del-marked"
	DelReleased       Step = "del-released"
	DelForgotten      Step = "del-forgotten"
	GCReleased        Step = "gc-released"
	GCForgotten       Step = "gc-forgotten"
)

// Steps lists every step, for tests that crash at each.
var Steps = []Step{AddStart, AddReserved, AddRecovered, AddDelegated, AddFailedReleased, AddCommitted, DelStart, DelMarked, DelReleased, DelForgotten, GCReleased, GCForgotten}

// ErrRecordMismatch is safe-ipam's CHECK failure code: the record does not
// hold the addresses of prevResult. Codes from 100 are plugin-specific.
const ErrRecordMismatch uint = 100

// Guard runs the verbs for one plugin config.
type Guard struct {
	cfg      *config.Config
	store    store.Store
	delegate *delegate.Delegate
	version  string // spoken with the delegate
	log      *slog.Logger
	now      func() time.Time
	owner    *record.Owner // this process, written into pending and releasing records
	node     string        // as Calico names it; records and GC are per node
	// At, when set, is called at every Step; crash tests stop there.
	At func(Step)
	// gcKeep and gcPath are set by OpenGC (safe-ipam gc): records GC
	// keeps beyond the verb's rules, and the CNI_PATH of its delegate DELs.
	gcKeep func(*record.Record) bool
	gcPath string

	closeLog func()
}

// New builds a Guard. The delegate must have been resolved.
func New(cfg *config.Config, st store.Store, d *delegate.Delegate, log *slog.Logger) (*Guard, error) {
	node, version, err := prepare(cfg, d)
	if err != nil {
		return nil, err
	}
	return newGuard(cfg, node, version, st, d, log), nil
}

// prepare resolves the node name and negotiates the CNI version with the
// delegate, both before any store is touched.
func prepare(cfg *config.Config, d *delegate.Delegate) (node, version string, err error) {
	if node, err = cfg.Node(); err != nil {
		return "", "", err
	}
	if version, err = delegate.Negotiate(cfg.CNIVersion, d.Versions); err != nil {
		return "", "", types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("delegate %s: %v", d.Type, err), "")
	}
	return node, version, nil
}

func newGuard(cfg *config.Config, node, version string, st store.Store, d *delegate.Delegate, log *slog.Logger) *Guard {
	return &Guard{cfg: cfg, store: st, delegate: d, version: version, log: log, now: time.Now, owner: record.Self(), node: node}
}

func (g *Guard) at(s Step) {
	if g.At != nil {
		g.At(s)
	}
}

// attachment validates the invocation's identity. skel checks it too; the
// stores build paths from it, so it is checked again here.
func (g *Guard) attachment(env Env) (record.Attachment, cniargs.Args, error) {
	att := record.Attachment{Network: g.cfg.Network, ContainerID: env.ContainerID, IfName: env.IfName}
	if err := att.Validate(); err != nil {
		return att, cniargs.Args{}, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	args, err := cniargs.Parse(env.Args)
	if err != nil {
		return att, args, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	return att, args, nil
}

// release runs the delegate DEL for att without pod identity, so the
// delegate frees only the container's own handles.
func (g *Guard) release(ctx context.Context, att record.Attachment, env Env, args cniargs.Args, prevResult []byte) error {
	conf := g.cfg.DelegateConfig(g.version, prevResult)
	call := delegate.Call{ContainerID: att.ContainerID, NetNS: env.NetNS, IfName: att.IfName, Args: args.WithoutPodIdentity().String(), Path: env.Path}
	if err := g.delegate.Run(ctx, "DEL", conf, call); err != nil {
		return fmt.Errorf("releasing %s in %s: %w", att, g.delegate.Type, err)
	}
	return nil
}

// handle is the delegate handle the attachment's addresses live under.
func (g *Guard) handle(att record.Attachment) string {
	if g.cfg.DelegateHandles == config.HandlesPod {
		return att.ContainerID // Calico 2.x without pod identity
	}
	return att.Network + "." + att.ContainerID
}

// storeError turns a store failure into the CNI error a runtime retries on.
func storeError(action string, err error) error {
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		return err
	}
	code := types.ErrInternal
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrConflict) {
		code = types.ErrTryAgainLater
	}
	return types.NewError(code, fmt.Sprintf("%s: %v", action, err), "")
}

// prevResultFor converts the config's prevResult to the delegate's version.
func (g *Guard) prevResultFor() ([]byte, error) {
	raw := g.cfg.RawPrevResult()
	if raw == nil {
		return nil, nil
	}
	res, err := parseResult(g.cfg.CNIVersion, raw)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding prevResult: %v", err), "")
	}
	conv, err := convertResult(res, g.version)
	if err != nil {
		return nil, err
	}
	return json.Marshal(conv)
}

// delPrevResult is prevResultFor for DEL, which must not fail forever on
// a prevResult it cannot read: it goes without one (calico-ipam ignores
// it anyway).
func (g *Guard) delPrevResult() []byte {
	prev, err := g.prevResultFor()
	if err != nil {
		g.log.Warn("DEL: dropping a prevResult that does not convert", "error", err)
		return nil
	}
	return prev
}

func (e Env) call() delegate.Call {
	return delegate.Call{ContainerID: e.ContainerID, NetNS: e.NetNS, IfName: e.IfName, Args: e.Args, Path: e.Path}
}
