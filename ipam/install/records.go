package install

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
)

// Once uninstalled, no DEL or GC passes through safe-ipam any more, so its
// records on the node can only go stale, and a stale record fences its
// addresses for ever if safe-ipam is installed again. Uninstall therefore
// forgets this node's records, with their address index entries and
// quarantines, and leaves the records' own allocations as they are: their
// pods run, and Calico's DEL frees them. A quarantined allocation is
// safe-ipam's alone (its sandbox's DEL released nothing), so nothing else
// would ever free it: uninstall releases it through the delegate, which
// leaves its address as Calico alone would have, free.

// nodeRecords are the record stores the node's configs route through
// safe-ipam, read before uninstall changes any config (afterwards no
// config names safe-ipam).
type nodeRecords struct {
	configs []*config.Config
	paths   []string
	binDir  string
}

// recordsOf finds every network config of the node whose IPAM goes
// through safe-ipam, in either mode.
func recordsOf(n Node) *nodeRecords {
	r := &nodeRecords{binDir: n.BinDir}
	files, err := cninode.ConfFiles(n.ConfDir)
	if err != nil {
		return r // no configs, no records of ours: install and uninstall say why themselves
	}
	for _, path := range files {
		f, err := cninode.ReadFile(path, n.BinDir)
		if err != nil || f.SafeIPAM == nil {
			continue // not safe-ipam's: nothing of ours to forget
		}
		r.configs, r.paths = append(r.configs, f.SafeIPAM), append(r.paths, path)
	}
	return r
}

// forget removes the node's records of every config (dry run: counts
// them) and says what it did; a store it cannot reach is an error that
// names it, and uninstall can be run again.
func (r *nodeRecords) forget(ctx context.Context, dryRun bool) ([]string, error) {
	var notes []string
	for i, cfg := range r.configs {
		n, q, err := forgetNetwork(ctx, cfg, r.paths[i], r.binDir, dryRun)
		if err != nil {
			return notes, fmt.Errorf("forgetting the records of %s: %w", r.paths[i], err)
		}
		verb, released := "forgot", "released"
		if dryRun {
			verb, released = "would forget", "would release"
		}
		notes = append(notes, fmt.Sprintf("%s %d record(s) of network %q on this node, with their address index entries (%s); their pods' allocations are left to Calico",
			verb, n, cfg.Network, cfg.Store.Type))
		if q > 0 {
			notes = append(notes, fmt.Sprintf("%s %d quarantined allocation(s) of network %q, which nothing else would free; their addresses are free in Calico again while the pods that were fenced from them run: restart those pods (safe-ipam audit lists them before uninstall, kind quarantine)",
				released, q, cfg.Network))
		}
	}
	return notes, nil
}

// forgetNetwork forgets the node's records of cfg's network and releases
// their quarantines; it returns how many of each.
func forgetNetwork(ctx context.Context, cfg *config.Config, path, binDir string, dryRun bool) (recs, quarantines int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", "uninstall")
	defer closeLog()
	o, err := invocation.Open(ctx, invocation.Call{Verb: invocation.VerbGC, Env: delegate.Env{Path: binDir}, Config: cfg, In: path, Log: log})
	if err != nil {
		return 0, 0, err
	}
	defer o.Close()
	list, err := o.Store.List(ctx, cfg.Network)
	if err != nil {
		return 0, 0, err
	}
	for _, rec := range list {
		if !dryRun {
			if err := o.Guard.Forget(ctx, rec, binDir); err != nil {
				return recs, quarantines, err
			}
		}
		recs, quarantines = recs+1, quarantines+len(rec.Quarantined)
	}
	return recs, quarantines, nil
}

// reindex gives the records of every config of the node that goes
// through safe-ipam their address index entries (store.Reindex), and says
// so. It never fails the install it follows: the node is protected, and
// an address a record without an entry holds is fenced once the next
// install, or the start of gc --apply --every, has indexed it (the
// DaemonSet's install and watch mount the file store read-only; its gc
// container does it there).
func reindex(n Node, out, errOut io.Writer) {
	r := recordsOf(n)
	for i, cfg := range r.configs {
		indexed, held, err := ReindexNetwork(context.Background(), cfg, r.paths[i])
		if err != nil {
			fmt.Fprintf(errOut, "safe-ipam install: indexing the records of %s: %v; gc --apply --every (the DaemonSet's gc container, which mounts the file store writable) does it at its start, as the next install does\n", r.paths[i], err)
			continue
		}
		fmt.Fprintf(out, "install: indexed the addresses of %d record(s) of network %q on this node\n", indexed, cfg.Network)
		for _, h := range held {
			fmt.Fprintf(errOut, "safe-ipam install: %s is held by two records, %s among them: run safe-ipam audit (duplicate)\n", h.Addr, h.Holder.Attachment)
		}
	}
}

// ReindexNetwork gives the records of cfg's network on this node (cfg
// read from the config at path) their address index entries
// (store.Reindex): install does it, and gc --apply --every at its start,
// since the DaemonSet's gc container is the one that may write the file
// store.
func ReindexNetwork(ctx context.Context, cfg *config.Config, path string) (int, []*store.HeldError, error) {
	node, err := cfg.Node()
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := opener.Open(ctx, cfg, node, opener.Options{In: path})
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	return store.Reindex(ctx, st, cfg.Network)
}
