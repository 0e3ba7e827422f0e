// Package guard implements safe-ipam's CNI verbs (ADD, DEL, CHECK, GC,
// STATUS): it records which attachment owns which addresses and makes
// every handle the delegate touches container-keyed, so no DEL can
// release by pod name. The one exception is Calico's own: a KubeVirt
// VM's handle, which Calico guards with owner attributes (see vm.go). It
// is handed an open store, a resolved delegate and a way to read Calico's
// data (CalicoData); package invocation opens them.
package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/cni/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

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
	calico   CalicoData
	version  string // spoken with the delegate
	log      *slog.Logger
	now      func() time.Time
	// Owner is this process, written into pending and releasing records
	// so that GC tells an ADD in flight from a dead one. Crash tests clear
	// it: a killed process owns nothing.
	Owner *record.Owner
	node  string // as Calico names it; records and GC are per node
	// host is this machine's host name (record.ThisHost), written into
	// records: several machines may run under one Calico node name.
	host string
	// deadNode: the records are a gone node's (ForNode), whose pod-name
	// handles are never released.
	deadNode bool
	// At, when set, is called at every Step; crash tests stop there.
	At func(Step)
}

// CalicoData is what the verbs read of Calico's own data, on rare paths only
// (a KubeVirt VM's pod, a holder on another node, an adopted pod-name
// handle): an ordinary pod's verbs never call it. Package lookup
// reads it as calico-ipam reaches it; an error means Calico could not
// tell, which the verbs take as doubt.
type CalicoData interface {
	// NodeKnown says whether Calico holds the Node called node.
	NodeKnown(ctx context.Context, node string) (bool, error)
	// Allocation is what Calico records of ip (a zero Allocation when ip
	// is not allocated).
	Allocation(ctx context.Context, ip netip.Addr) (Allocation, error)
	// HandleAllocations lists the addresses Calico keeps under handle,
	// with what it records of each.
	HandleAllocations(ctx context.Context, handle string) (map[netip.Addr]Allocation, error)
}

// Allocation is what Calico records of one allocated address besides the
// address: whose it is. An address alone never proves that: a pod-name
// handle or a VM handle may hold the same address for another pod.
type Allocation struct {
	Handle string
	// Owner is the allocation's owner attributes (Calico's secondary
	// attributes: namespace, pod, node, timestamp, and a VM's vmi-name);
	// Calico 2.x recorded none.
	Owner map[string]string
	// Alternate is a VM allocation's alternate owner, the pod a live
	// migration moves the VM to; nil when none.
	Alternate map[string]string
}

// Parts are what a Guard runs over, each settled before the first verb
// (package invocation opens them for a call).
type Parts struct {
	Config *config.Config
	// Node is the node's name as Calico names it; records and GC are per
	// node.
	Node string
	// Version is the CNI version spoken with Delegate.
	Version  string
	Delegate *delegate.Delegate
	Store    store.Store
	Calico   CalicoData
	Log      *slog.Logger
}

// New builds a Guard over its parts.
func New(p Parts) *Guard {
	return &Guard{cfg: p.Config, store: p.Store, delegate: p.Delegate, calico: p.Calico, version: p.Version, log: p.Log,
		now: time.Now, Owner: record.Self(), node: p.Node, host: record.ThisHost()}
}

func (g *Guard) at(s Step) {
	if g.At != nil {
		g.At(s)
	}
}

func (g *Guard) attachment(env delegate.Env) (record.Attachment, cniargs.Args, error) {
	return AttachmentOf(g.cfg.Network, env)
}

// AttachmentOf validates the identity of a call on network (an error has
// code 4), which every verb but GC and STATUS names. skel checks it too;
// the stores build paths from it, so it is checked again here.
func AttachmentOf(network string, env delegate.Env) (record.Attachment, cniargs.Args, error) {
	att := record.Attachment{Network: network, ContainerID: env.ContainerID, IfName: env.IfName}
	if err := att.Validate(); err != nil {
		return att, cniargs.Args{}, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	args, err := cniargs.Parse(env.Args)
	if err != nil {
		return att, args, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	return att, args, nil
}

// handle is the delegate handle the attachment's addresses live under.
func (g *Guard) handle(att record.Attachment) string {
	if g.cfg.DelegateHandles == config.HandlesPod {
		return att.ContainerID // Calico 2.x without pod identity
	}
	return att.Network + "." + att.ContainerID
}

// PastDeadline turns the error of a verb whose ctx passed its deadline
// (ipam.verbTimeout) into the CNI error that says so: code 11, so the
// runtime tries again; what the verb left (a pending or releasing
// record) is what a crash leaves, and the next call settles it.
func PastDeadline(ctx context.Context, verb string, timeout time.Duration, err error) error {
	if err == nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("%s did not finish within ipam.verbTimeout (%s): %v", verb, timeout, err), "")
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

// ForNode is a Guard over another node's records in st, for releasing the
// records of a node that is gone (safe-ipam gc --dead-nodes): the same
// config, delegate and version, that node's name and store. It releases
// no pod-name handle: see releasePodHandle.
func (g *Guard) ForNode(node string, st store.Store) *Guard {
	other := *g
	other.node, other.store, other.deadNode = node, st, true
	return &other
}

// NodeFailing says whether err, a verb's failure, says that this node
// cannot start or stop pods (its record store or Calico's datastore does
// not answer, the delegate fails, the deadline passed), rather than
// something of this one call: its input, a fenced address, or a sandbox
// the runtime's retry gets past. Codes from 100 on are the delegate's
// too, so every one of them counts.
func NodeFailing(err error) bool {
	if err == nil {
		return false
	}
	var f *fenced
	if errors.As(err, &f) {
		return f.node
	}
	var retry *sandboxRetry
	if errors.As(err, &retry) {
		return false
	}
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		switch cniErr.Code {
		case types.ErrIncompatibleCNIVersion, types.ErrUnsupportedField, types.ErrUnknownContainer,
			types.ErrInvalidEnvironmentVariables, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
			return false
		}
	}
	return true
}

// sandboxRetry is an ADD this sandbox cannot make, which the runtime's
// retry (in a new sandbox, or once the other operation is done) gets
// past: nothing of the node's.
type sandboxRetry struct{ err error }

func (r *sandboxRetry) Error() string { return r.err.Error() }
func (r *sandboxRetry) Unwrap() error { return r.err }
