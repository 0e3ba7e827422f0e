package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/safe-ipam/safe-ipam/ipam/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// Del marks the record releasing, releases the attachment's own handles in
// the delegate and then forgets the record. The mark comes first so that a
// crash after the release cannot leave a committed record that a later ADD
// would replay with addresses the delegate has freed. It succeeds when
// there is nothing to release. If the delegate fails, the record stays and
// the runtime retries.
func (g *Guard) Del(ctx context.Context, env delegate.Env) error {
	att, args, err := g.attachment(env)
	if err != nil {
		return err
	}
	prev := g.delPrevResult()
	g.at(DelStart)
	now := g.now().UTC()
	// The marker carries what the DEL itself knows (the pod, and the
	// addresses its prevResult names): the etcd store writes it without
	// reading the record, so a retried DEL finds them only there.
	marker := &record.Record{Attachment: att, Node: g.node, Host: g.host, Handle: g.handle(att), Created: now, Updated: now, Owner: g.Owner,
		PodNamespace: args.Get(cniargs.PodNamespace), PodName: args.Get(cniargs.PodName), PodUID: args.Get(cniargs.PodUID), IPs: g.ipsOf(prev)}
	marked, err := g.store.MarkReleasing(ctx, marker)
	if errors.Is(err, store.ErrQuarantined) {
		// Its allocation holds an address a running attachment uses; the
		// holder's DEL or GC releases it.
		g.log.Info("DEL of a quarantined attachment: its allocation stays until its holder is released", "attachment", att.String())
		return nil
	}
	if err != nil {
		return g.delUnmarked(ctx, att, env, args, prev, err)
	}
	g.at(DelMarked)
	if err := g.releaseWithVM(ctx, att, marked, env, args, prev); err != nil {
		return err
	}
	if marked == nil {
		if err := g.releaseRenamed(ctx, att, marker.IPs, env.Path); err != nil {
			return err
		}
	}
	g.releasePodHandle(ctx, marked, env, runtimeDEL)
	if marked, err = g.releaseQuarantines(ctx, marked, env); err != nil {
		return err
	}
	g.at(DelReleased)
	if marked != nil {
		// A conflict means an ADD took the attachment over meanwhile.
		if _, err := g.store.Swap(ctx, att, marked, nil); err != nil && !errors.Is(err, store.ErrConflict) {
			return storeError("forgetting "+att.String(), err)
		}
		g.handBack(ctx, marked)
	}
	g.at(DelForgotten)
	g.log.Info("DEL", "attachment", att.String())
	return nil
}

// ipsOf lists the addresses of a prevResult in the delegate's version, or
// none when there is none or it does not parse.
func (g *Guard) ipsOf(prev []byte) []string {
	if prev == nil {
		return nil
	}
	res, err := parseResult(g.version, prev)
	if err != nil {
		return nil
	}
	ips, _ := resultIPs(res)
	return ips
}

// Check verifies that the attachment's committed record holds exactly the
// addresses of prevResult, then asks the delegate if it has a CHECK.
func (g *Guard) Check(ctx context.Context, env delegate.Env) error {
	att, args, err := g.attachment(env)
	if err != nil {
		return err
	}
	raw := g.cfg.RawPrevResult()
	if raw == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs a prevResult", "")
	}
	prev, err := parseResult(g.cfg.CNIVersion, raw)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding prevResult: %v", err), "")
	}
	rec, err := g.store.Get(ctx, att)
	if err != nil {
		return storeError("reading "+att.String(), err)
	}
	if err := matchRecord(att, rec, prev); err != nil {
		return err
	}
	return g.forwardCheck(ctx, att, env, args)
}

func matchRecord(att record.Attachment, rec *record.Record, prev types.Result) error {
	if rec == nil {
		return types.NewError(types.ErrUnknownContainer, fmt.Sprintf("no record for %s", att), "")
	}
	if rec.State != record.Committed {
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("record for %s is %s, not committed", att, rec.State), "")
	}
	want, err := resultIPs(prev)
	if err != nil {
		return err
	}
	if !sameSet(rec.IPs, want) {
		return types.NewError(ErrRecordMismatch, fmt.Sprintf("%s holds %s, prevResult has %s", att, strings.Join(rec.IPs, ","), strings.Join(want, ",")), "")
	}
	return nil
}

func (g *Guard) forwardCheck(ctx context.Context, att record.Attachment, env delegate.Env, args cniargs.Args) error {
	if hasCheck, _ := version.GreaterThanOrEqualTo(g.version, "0.4.0"); !g.cfg.Delegate.ForwardsCheck() || !hasCheck {
		return nil
	}
	prev, err := g.prevResultFor()
	if err != nil {
		return err
	}
	conf := g.cfg.DelegateConfig(g.version, prev)
	call := g.addCall(att, env, args)
	return g.delegate.Run(ctx, "CHECK", conf, call)
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// GC releases every record of the network on this node whose attachment
// the runtime does not list as valid. Without the list it releases nothing: a runtime
// that cannot say what runs must not be read as "nothing runs".
func (g *Guard) GC(ctx context.Context, env delegate.Env, stdin []byte) error {
	valid, listed, err := validAttachments(stdin)
	if err != nil {
		return err
	}
	if !listed {
		g.log.Warn("GC without cni.dev/valid-attachments: releasing nothing")
		return nil
	}
	recs, err := g.store.List(ctx, g.cfg.Network)
	if err != nil {
		return storeError("listing records of "+g.cfg.Network, err)
	}
	w := g.Witness(g.runtimeListing(valid), false)
	if why := rulebook.TrustListing(w.Listing, g.node, w.Shared, recs); why != "" {
		return g.distrustNoSandbox(why)
	}
	var errs []error
	for _, rec := range recs {
		if !w.Judge(rec).Release {
			continue
		}
		if err := g.Collect(ctx, rec, env.Path, w); err != nil {
			errs = append(errs, err)
		}
	}
	if g.delegate.Speaks("1.1.0") {
		if err := g.forwardGC(ctx, env); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrors("GC", errs)
}

// runtimeListing is the runtime's valid attachments at GC as the
// rulebook's witness: this machine's runtime, for this node, and settled
// (the runtime lists a sandbox before it sends GC). An empty list is the
// runtime's word that nothing runs; null (libcni's nil list) is not.
func (g *Guard) runtimeListing(valid map[[2]string]bool) *rulebook.Listing {
	source := "the runtime's " + validAttachmentsKey
	if valid == nil {
		source += ", which is null,"
	}
	return &rulebook.Listing{Source: source, Node: g.node, Host: g.host, Entries: len(valid), SaysNone: valid != nil,
		Attachment: func(containerID, ifname string) bool { return valid[[2]string{containerID, ifname}] }}
}

// Witness is the rulebook's evidence for this node's records: listing
// (nil for none), this Guard's clock and gcGracePeriod, and whether the
// store holds other machines' records too. forget is repair's.
func (g *Guard) Witness(listing *rulebook.Listing, forget bool) rulebook.Witness {
	_, shared := g.store.(store.Cluster)
	return rulebook.Witness{Node: g.node, Shared: shared, Listing: listing, Now: g.now(), Grace: g.cfg.GCGracePeriod, Forget: forget}
}

// DeadNodeWitness is the evidence against the records of this Guard's
// node (a ForNode Guard) when Calico no longer knows it: its death, not a
// runtime, so they are judged whichever host wrote them.
func (g *Guard) DeadNodeWitness(death *rulebook.Death) rulebook.Witness {
	w := g.Witness(nil, false)
	w.Death = death
	return w
}

// Collect releases one record as DEL does: mark, delegate DEL (with
// CNI_PATH cniPath), forget. It marks the record it listed first; if the
// record changed meanwhile (a DEL marked it, an ADD took it over), it
// judges the record as it is now by rules, so a GC that succeeds has
// released every attachment the rules do not keep. The GC verb and
// safe-ipam gc both collect through it.
func (g *Guard) Collect(ctx context.Context, rec *record.Record, cniPath string, w rulebook.Witness) error {
	return g.collect(ctx, rec, cniPath, w, ownJudgment)
}

// collect is Collect; own says whose word frees a pod-name handle
// (releasePodHandle).
func (g *Guard) collect(ctx context.Context, rec *record.Record, cniPath string, w rulebook.Witness, own evidence) error {
	env := delegate.Env{Path: cniPath}
	att := rec.Attachment
	for attempt := 0; ; attempt++ {
		marker := store.Releasing(rec, g.now().UTC())
		marker.Owner = g.Owner
		marked, err := g.store.Swap(ctx, att, rec, marker)
		if errors.Is(err, store.ErrConflict) && attempt < 3 {
			if rec = marked; rec == nil || !w.Judge(rec).Release {
				return nil
			}
			continue
		}
		if err != nil {
			return storeError("marking "+att.String(), err)
		}
		return g.releaseMarked(ctx, marked, env, own)
	}
}

func (g *Guard) releaseMarked(ctx context.Context, marked *record.Record, env delegate.Env, own evidence) error {
	att := marked.Attachment
	if err := g.releaseWithVM(ctx, att, marked, delegate.Env{Path: env.Path}, cniargs.Args{}, nil); err != nil {
		return err
	}
	g.releasePodHandle(ctx, marked, env, own)
	marked, err := g.releaseQuarantines(ctx, marked, env)
	if err != nil {
		return err
	}
	g.at(GCReleased)
	if _, err := g.store.Swap(ctx, att, marked, nil); err != nil && !errors.Is(err, store.ErrConflict) {
		return storeError("forgetting "+att.String(), err)
	}
	g.handBack(ctx, marked)
	g.at(GCForgotten)
	g.log.Info("GC released", "attachment", att.String(), "ips", marked.IPs)
	return nil
}

// Forget drops rec, with its address index entries, for uninstall: its
// own addresses stay allocated (its pod runs; Calico's DEL frees them
// once safe-ipam is gone). Each allocation quarantined with it is first
// given fate (nil: released through the delegate, as the holder's DEL
// would), since no DEL of safe-ipam will come for it.
func (g *Guard) Forget(ctx context.Context, rec *record.Record, cniPath string, fate QuarantineFate) error {
	if fate == nil {
		fate = g.releaseQuarantine(delegate.Env{Path: cniPath})
	}
	rec, err := g.settleQuarantines(ctx, rec, fate)
	if err != nil {
		return err
	}
	if _, err := g.store.Swap(ctx, rec.Attachment, rec, nil); err != nil {
		return fmt.Errorf("forgetting %s: %w", rec.Attachment, err)
	}
	return nil
}

func (g *Guard) forwardGC(ctx context.Context, env delegate.Env) error {
	conf := g.cfg.DelegateConfig("1.1.0", nil)
	return g.delegate.Run(ctx, "GC", conf, delegate.Env{Path: env.Path})
}

// validAttachmentsKey is where the runtime lists what runs (CNI 1.1).
const validAttachmentsKey = "cni.dev/valid-attachments"

// validAttachments reads cni.dev/valid-attachments, telling an absent key
// from a list, and null (libcni's nil list: no sandbox of the network;
// a nil map) from an empty list. GC releases whatever the list leaves out, so a list
// it cannot read whole frees nothing: every entry must be an object with
// a non-empty containerID and ifname, and anything else is an error
// naming the entry (a lenient decoder read [null] or a misspelt key as an
// attachment that runs nowhere, and freed the live one).
func validAttachments(stdin []byte) (map[[2]string]bool, bool, error) {
	var conf map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, false, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding %s: %v", validAttachmentsKey, err), "")
	}
	raw, listed := conf[validAttachmentsKey]
	if !listed {
		return nil, false, nil
	}
	if string(raw) == "null" {
		// libcni's GCNetworkList sends a nil list as null: the runtime has
		// no sandbox of the network.
		return nil, true, nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil || entries == nil {
		return nil, false, invalidValid(validAttachmentsKey, "must be a list of {\"containerID\", \"ifname\"}")
	}
	valid := make(map[[2]string]bool, len(entries))
	for i, e := range entries {
		var a struct {
			ContainerID *string `json:"containerID"`
			IfName      *string `json:"ifname"`
		}
		where := fmt.Sprintf("%s[%d]", validAttachmentsKey, i)
		if err := json.Unmarshal(e, &a); err != nil || len(e) == 0 || e[0] != '{' {
			return nil, false, invalidValid(where, fmt.Sprintf("%s is not an attachment object", e))
		}
		if a.ContainerID == nil || *a.ContainerID == "" {
			return nil, false, invalidValid(where, "has no containerID")
		}
		if a.IfName == nil || *a.IfName == "" {
			return nil, false, invalidValid(where, "has no ifname")
		}
		valid[[2]string{*a.ContainerID, *a.IfName}] = true
	}
	return valid, true, nil
}

// distrustNoSandbox is GC's answer to a runtime whose list the rulebook
// does not trust (it lists no sandbox of the network while the node
// holds records it would judge): as with safe-ipam gc's empty liveness
// source, an empty answer is never taken for "nothing runs" (incident
// 003). Nothing is released.
func (g *Guard) distrustNoSandbox(why string) error {
	msg := fmt.Sprintf("GC releases nothing: %s (safe-ipam gc collects them once the runtime lists its sandboxes)", why)
	g.log.Warn("GC released nothing", "why", msg)
	return types.NewError(types.ErrTryAgainLater, msg, "")
}

func invalidValid(where, why string) error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("%s %s: GC releases nothing it cannot read", where, why), "")
}

func joinErrors(verb string, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return types.NewError(types.ErrInternal, fmt.Sprintf("%s: %d error(s): %s", verb, len(errs), strings.Join(msgs, "; ")), "")
}

// Status reports whether ADD can work: the store answers and the delegate
// is there (and ready, if it has STATUS).
func (g *Guard) Status(ctx context.Context, env delegate.Env) error {
	if err := g.store.Ping(ctx); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("record store: %v", err), "")
	}
	if !g.delegate.Speaks("1.1.0") {
		return nil
	}
	conf := g.cfg.DelegateConfig("1.1.0", nil)
	return g.delegate.Run(ctx, "STATUS", conf, env)
}
