package guard

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/safe-ipam/safe-ipam/ipam/cni/cniargs"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

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
