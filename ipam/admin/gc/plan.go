package gc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/cni/backends"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// GC from outside the runtime: behind Calico's main plugin (CNI 1.0.0 at
// most) or under containerd 1.6, no CNI GC ever reaches safe-ipam, so
// records whose DEL never came would stay forever. gc lists this node's
// records, then reads a liveness source, and releases what the source
// positively does not list, exactly as the GC verb does: by the same
// rules (package rulebook), through the same release (guard.Collect).

// Plan is what a gc would do with this node's records of the network.
type Plan struct {
	// Records is how many records of this node the plan judged.
	Records int
	Release []*record.Record
	Keep    []Kept
	// OtherHosts are the hosts other than this one that wrote some of
	// the records, which were kept unjudged: machines sharing this
	// node's Calico name.
	OtherHosts []string
	witness    rulebook.Witness
}

// Kept is a record gc leaves alone, and why.
type Kept struct {
	Record *record.Record
	Why    string
}

// Releaser is one node's record store and the Guard that releases from it,
// wired from the node's CNI config file as the runtime would run the
// plugin, with the delegate found in CNIPath.
type Releaser struct {
	Name    string
	Network string
	CNIPath string
	// MaxGoneShare is the dead-node sweep's --dead-node-max-share (0: the
	// rulebook's default).
	MaxGoneShare float64
	guard        *guard.Guard
	store        store.Store
	opened       *invocation.Opened
}

// OpenReleaser wires a Releaser from a CNI config file of the node.
func OpenReleaser(ctx context.Context, file *cninode.File, cniPath string, log *slog.Logger) (*Releaser, error) {
	if file.SafeIPAM == nil {
		return nil, fmt.Errorf("CNI config %s: its IPAM is not safe-ipam", file.Path)
	}
	cfg := file.SafeIPAM
	o, err := backends.OpenRelease(ctx, cfg, cniPath, file.Path, log)
	if err != nil {
		return nil, err
	}
	name, err := cfg.Node()
	if err != nil {
		o.Close()
		return nil, err
	}
	return &Releaser{Name: name, Network: cfg.Network, CNIPath: cniPath, guard: o.Guard, store: o.Store, opened: o}, nil
}

// Close closes the node's store and what its Guard read Calico's data
// through.
func (n *Releaser) Close() error { return n.opened.Close() }

// List lists this node's records of the network. List them before
// reading what runs: a sandbox that becomes ready in between is then
// listed by the source, not mistaken for garbage.
func (n *Releaser) List(ctx context.Context) ([]*record.Record, error) {
	recs, err := n.store.List(ctx, n.Network)
	if err != nil {
		return nil, fmt.Errorf("listing records of %s: %w", n.Network, err)
	}
	return recs, nil
}

// Plan judges recs by the rulebook, on listing's word. Any record
// written less than gcGracePeriod ago is kept too: its sandbox may not be
// listed by any source yet (a liveness source lags).
func (n *Releaser) Plan(recs []*record.Record, listing *rulebook.Listing) *Plan {
	w := n.guard.Witness(listing, false)
	p := &Plan{Records: len(recs), witness: w, OtherHosts: rulebook.OtherHosts(listing, w.Shared, recs)}
	for _, rec := range recs {
		if v := w.Judge(rec); !v.Release {
			p.Keep = append(p.Keep, Kept{Record: rec, Why: v.Why})
			continue
		}
		p.Release = append(p.Release, rec)
	}
	return p
}

// ErrFormerNeedsCluster: a file store holds this machine's records
// whatever its Calico name: there are no records under a former name.
var ErrFormerNeedsCluster = errors.New("--former-node needs the etcd store: a file store holds this machine's records under whatever name it has")

// Former is this node's store and Guard over the records of name, a
// Calico node name this machine had before.
func (n *Releaser) Former(name string) (*Releaser, error) {
	cluster, ok := n.store.(store.Cluster)
	if !ok {
		return nil, ErrFormerNeedsCluster
	}
	st := cluster.ForNode(name)
	return &Releaser{Name: name, Network: n.Network, CNIPath: n.CNIPath, MaxGoneShare: n.MaxGoneShare, guard: n.guard.ForNode(name, st), store: st, opened: n.opened}, nil
}

// Shared says whether the node's store holds other machines' records too.
func (n *Releaser) Shared() bool { return n.guard.Witness(nil, false).Shared }

// Apply releases the plan's records as the GC verb does, going on past
// errors and reporting them all. A record that changed since it was
// listed is judged again as it is now.
func (n *Releaser) Apply(ctx context.Context, p *Plan) error {
	var errs []error
	for _, rec := range p.Release {
		if err := n.guard.Collect(ctx, rec, n.CNIPath, p.witness); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrors(errs)
}
