// Package backends sets up what safe-ipam's full builds reach: the CNI
// binary's etcd build (safe-ipam-etcd) and the admin binary link every
// datastore, while the CNI binary's lean build opens the file store only
// (invocation.Lean; why there are three builds: package builds). Full
// are the full builds' datastores; OpenRelease opens a release as the GC
// verb does, for the commands that release records (gc, uninstall) and
// the chaos harness. It sits above invocation and the store opener, so
// that neither imports the other.
package backends

import (
	"context"
	"log/slog"

	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/cni/lookup/etcdlookup"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
)

// Full are what a call of the CNI verbs reaches with every datastore
// linked: the build of the CNI binary with the etcd client
// (safe-ipam-etcd), and the admin commands that run the verbs' releases
// (gc, uninstall).
func Full() invocation.Backends {
	return invocation.Backends{
		EtcdStore: true,
		Store: func(ctx context.Context, cfg *config.Config, node, in string) (store.Store, error) {
			return opener.Open(ctx, cfg, node, opener.Options{In: in})
		},
		CalicoEtcd: etcdlookup.New,
	}
}

// OpenRelease opens what releasing cfg's records takes, as the GC verb
// opens it: the record store, Calico's datastore and the delegate, found
// in cniPath. in names the file cfg came from, for errors.
func OpenRelease(ctx context.Context, cfg *config.Config, cniPath, in string, log *slog.Logger) (*invocation.Opened, error) {
	return invocation.Open(ctx, invocation.Call{Verb: invocation.VerbGC, Env: delegate.Env{Path: cniPath}, Config: cfg, In: in, Log: log, Backends: Full()})
}
