package gc

import (
	"context"
	"fmt"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// settleClaims settles what the cluster-wide claims leave on this node
// (guard.SettleClaims: claims no record of it holds, allocations kept for
// other nodes' holders that are gone) and says what it did. --apply
// only: a dry run changes nothing.
func (r *runner) settleClaims(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, r.out.Timeout)
	defer cancel()
	cfg := r.conf.File.SafeIPAM
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", "gc-claims")
	defer closeLog()
	node, err := OpenReleaser(ctx, r.conf.File, r.conf.BinDir, log)
	if err != nil {
		return r.cmd.Fail(err)
	}
	defer node.Close()
	done, err := node.guard.SettleClaims(ctx, node.CNIPath, r.quarantineGrace)
	var said []string
	for _, part := range []struct {
		n    int
		what string
	}{
		{done.Forgotten, "forgot %d claim(s) of this node that no record holds"},
		{done.Claimed, "claimed %d address(es) of records that had none"},
		{done.Unquarantined, "released %d allocation(s) quarantined for other nodes' holders that are gone"},
		{done.Waiting, "kept %d allocation(s) quarantined for holders whose claim is gone, until it stays gone for " + r.quarantineGrace.String()},
	} {
		if part.n > 0 {
			said = append(said, fmt.Sprintf(part.what, part.n))
		}
	}
	if len(said) > 0 {
		fmt.Fprintf(r.stderr, "gc: claims: %s\n", strings.Join(said, "; "))
	}
	for _, h := range done.Held {
		fmt.Fprintf(r.stderr, "safe-ipam gc: %s is held by two records, %s on node %s among them: run safe-ipam audit (duplicate)\n", h.Addr, h.Holder.Attachment, h.Holder.Node)
	}
	if err != nil {
		fmt.Fprintf(r.stderr, "safe-ipam gc: settling this node's claims: %v\n", err)
		return admin.ExitError
	}
	return admin.ExitOK
}
