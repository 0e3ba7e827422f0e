package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
)

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
