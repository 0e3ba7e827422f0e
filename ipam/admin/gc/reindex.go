package gc

import (
	"context"
	"fmt"

	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
)

// reindex gives this node's records that have no address index entry
// theirs (opener.Reindex: records written before fencing existed
// fence nothing until then), and says so. gc --apply --every does it
// once, at its start: the DaemonSet's gc container is the one that mounts
// the file store writable (install and watch mount it read-only), so
// every DaemonSet start and upgrade indexes, on etcd and file-store nodes
// alike. It reports whether it did; a store that does not answer is
// tried again before the next round.
func (r *runner) reindex(ctx context.Context) bool {
	cfg := r.conf.File.SafeIPAM
	indexed, held, err := opener.Reindex(ctx, cfg, r.conf.Conf)
	if err != nil {
		fmt.Fprintf(r.stderr, "safe-ipam gc: indexing the records of %s: %v; tried again before the next round\n", r.conf.Conf, err)
		return false
	}
	fmt.Fprintf(r.stderr, "gc: indexed the addresses of %d record(s) of network %q on this node\n", indexed, cfg.Network)
	for _, h := range held {
		fmt.Fprintf(r.stderr, "safe-ipam gc: %s is held by two records, %s among them: run safe-ipam audit (duplicate)\n", h.Addr, h.Holder.Attachment)
	}
	return true
}
