package gc

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
)

// Every node's gc container runs --dead-nodes, and a sweep reads every
// node's record keys and Calico's Nodes: run on every node, that is the
// square of the nodes per period. So the --every loops elect one of them
// per cluster (as kube-controllers is one instance), through the record
// store every node shares; the others ask who leads, one small read a
// round. A run by hand (no --every) sweeps without an election.

// sweepTTL is the leader's lease in periods: a leader that dies is
// replaced within that many periods (one that stops revokes its lease).
const sweepTTL = 3

// sweeper is the store the loop campaigns through, kept open across
// rounds, as its lease lives only as long as its client; opened again when
// the store the node's config names changes.
type sweeper struct {
	st    store.Store
	where string
	// holdOff is how many more rounds this node does not campaign, after
	// sweeps of its failed; failed counts its sweeps that failed in a row.
	holdOff, failed int
	// leading: the last round found this node leading.
	leading bool
	// Where the claims are swept (claims.Kept), they are elected through
	// a Lease of the API server: claims is its client, campaign this
	// node's part in the election, network the network swept, and last
	// the Lease as this round's election read it (nil: not read).
	claims   *claims.Client
	campaign claims.Campaign
	network  string
	last     *claims.Sweep
}

// noteLeader logs when this node takes the lead of the sweeps, or loses
// it, so that an operator finds the elected node in its log.
func (s *sweeper) noteLeader(log io.Writer, leading bool, network, leader string) {
	switch {
	case leading && !s.leading:
		fmt.Fprintf(log, "gc --dead-nodes: this node leads the dead-node sweeps of network %s\n", network)
	case !leading && s.leading:
		fmt.Fprintf(log, "gc --dead-nodes: this node no longer leads the dead-node sweeps of network %s (%s does)\n", network, cmp.Or(leader, "nobody"))
	}
	s.leading = leading
}

// resignAfter is how many sweeps in a row a leader may fail before it
// gives the lead up: one failure may be a passing fault (a slow etcd),
// and moving the lead costs every candidate a campaign.
const resignAfter = 2

// swept notes how this node's sweep went. Leading means sweeping
// successfully: a leader whose sweeps keep failing (a bad endpoint,
// expired TLS files, a listing it must refuse) gives the lead up and
// holds off, so that another node sweeps.
func (s *sweeper) swept(ok bool) {
	// chaos:leader-never-resigns (a mutant breaks what follows)
	if ok {
		s.failed = 0
		return
	}
	if s.failed++; s.failed >= resignAfter {
		s.failed = 0
		s.resign(sweepTTL)
	}
}

// lead says which node sweeps the network of conf ("" for none),
// campaigning for this one, conf.Node, when none does and campaign is set
// (a dry run writes nothing, so never campaigns) and it does not hold
// off. A file store holds one node's records: there is nothing to elect,
// this node sweeps, and finds nothing to do.
func (s *sweeper) lead(ctx context.Context, conf *admin.NodeConf, ttl time.Duration, campaign bool) (string, error) {
	if conf.NodeErr != nil {
		return "", conf.NodeErr
	}
	cfg := conf.File.SafeIPAM
	if claims.Kept(cfg) {
		return s.leadClaims(ctx, conf, ttl, campaign)
	}
	if cfg.Store.Type != config.StoreEtcd {
		return conf.Node, nil
	}
	where := fmt.Sprint(cfg.Store, conf.Node)
	if s.st == nil || s.where != where {
		s.close()
		st, err := opener.Open(ctx, cfg, conf.Node, opener.Options{In: conf.Conf})
		if err != nil {
			return "", err
		}
		s.st, s.where = st, where
	}
	cluster, ok := s.st.(store.Cluster)
	if !ok {
		return conf.Node, nil
	}
	if s.holdOff > 0 {
		s.holdOff--
		campaign = false
	}
	return cluster.Lead(ctx, cfg.Network, ttl, campaign)
}

// resign gives the lead up, if this node had it, and holds off from
// campaigning for rounds rounds.
func (s *sweeper) resign(rounds int) {
	s.close()
	s.holdOff = rounds
}

// close gives the lead up, if this node had it.
func (s *sweeper) close() {
	if s.st != nil {
		s.st.Close()
		s.st = nil
	}
	if s.claims != nil {
		if s.leading {
			ctx, cancel := context.WithTimeout(context.Background(), claims.Timeout)
			_ = s.claims.Resign(ctx, s.network, &s.campaign) // else its Lease expires
			cancel()
		}
		s.claims.Close()
		s.claims, s.last = nil, nil
	}
}

// leadClaims is lead where the claims are swept: through the sweeps'
// Lease, which this round's sweep then reads its notes from.
func (s *sweeper) leadClaims(ctx context.Context, conf *admin.NodeConf, ttl time.Duration, campaign bool) (string, error) {
	cl := s.claimsClient(conf)
	if s.holdOff > 0 {
		s.holdOff--
		campaign = false
	}
	s.campaign.Self = conf.Node
	sw, err := cl.Lead(ctx, conf.File.Network, &s.campaign, ttl, campaign)
	if err != nil {
		return "", err
	}
	switch {
	case sw.Leading && !campaign:
		// Holding off, yet still the holder (its resignation failed): it
		// does not sweep, and gives the lead up again.
		_ = cl.Resign(ctx, conf.File.Network, &s.campaign)
		return "", nil
	case sw.Leader == conf.Node && !sw.Leading:
		return conf.Node + " (another gc under this node's name)", nil
	}
	s.last = sw
	return sw.Leader, nil
}

// claimsClient is the client of the API server conf's claims are in,
// kept open across rounds while conf names the same one.
func (s *sweeper) claimsClient(conf *admin.NodeConf) *claims.Client {
	cfg := conf.File.SafeIPAM
	where := fmt.Sprint("claims ", cfg.Calico.Kubeconfig, " ", cfg.Network, " ", conf.Node)
	if s.claims == nil || s.where != where {
		changed := s.where != where
		s.close()
		if changed {
			// Else kept across a resignation: a Lease it failed to give
			// up is still its own.
			s.campaign = claims.Campaign{}
		}
		s.claims, s.where, s.network = claims.ClientFor(cfg, nil), where, cfg.Network
	}
	return s.claims
}
