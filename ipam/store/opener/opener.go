// Package opener opens the record store a plugin config names: the one
// way every admin command and the CNI binary's etcd build reach
// safe-ipam's records, so that all of them find the same store, with the
// same settings named in their errors. (The CNI binary's lean build,
// which must not link the etcd client, opens the file store as Open
// does: invocation.Lean.) backends.Full adds Calico's datastore for the
// verbs.
package opener

import (
	"context"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
)

// Access says whether the caller writes.
type Access int

const (
	// ReadWrite is the plugin's and the commands' that change records.
	ReadWrite Access = iota
	// ReadOnly is for commands that only read (audit, doctor): a file
	// store needs no write access and takes no lock.
	ReadOnly
)

// Options are how a caller opens a store beyond the config.
type Options struct {
	Access Access
	// In names the file the config came from, for errors ("" for stdin).
	In string
}

// Open opens the record store cfg names for node's records.
func Open(ctx context.Context, cfg *config.Config, node string, o Options) (store.Store, error) {
	s := cfg.Store
	if s.Type == config.StoreEtcd {
		return etcdstore.Open(ctx, etcdstore.Config{
			Endpoints: s.Endpoints, Prefix: s.Prefix, Node: node,
			TLS: cfg.StoreTLS(o.In), DialTimeout: s.DialTimeout.Std(),
		})
	}
	if o.Access == ReadOnly {
		return filestore.OpenReadOnly(s.Dir)
	}
	return filestore.Open(s.Dir)
}

// Reindex gives the records of cfg's network on this node (cfg
// read from the config at path) their address index entries
// (store.Reindex), within 30 seconds: install does it, and gc --apply
// --every at its start, since the DaemonSet's gc container is the one
// that may write the file store.
func Reindex(ctx context.Context, cfg *config.Config, path string) (int, []*store.HeldError, error) {
	node, err := cfg.Node()
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := Open(ctx, cfg, node, Options{In: path})
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	// The cluster-wide claims of Calico's Kubernetes datastore are not
	// made here: gc --apply claims the records that lack them every round,
	// with the rulebook's judgment of any claim it meets.
	return store.Reindex(ctx, st, cfg.Network)
}
