package claims

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// A node that is gone leaves its claims: its records went with its file
// store, and no DEL or gc of it will come, while kube-controllers frees
// a deleted node's addresses and Calico hands them out again. Its claims
// would fence them for ever. So one node per cluster, elected through a
// Lease in the API server (as client-go's leader election), sweeps them:
// it lists the network's claims once a period, and releases those of
// nodes Calico no longer knows once two sweeps found them gone at least a
// grace apart, by the API server's clock. The Lease holds the sweeps'
// notes of the nodes found gone, so a new leader goes on from them.

// LeaseNamespace holds the sweeps' Lease. deploy/safe-ipam-claims.yaml
// creates the Lease of Calico's network, k8s-pod-network, there, and
// grants LeaseVerbs on it alone: the identity of Calico's CNI kubeconfig,
// which every node holds, can touch no other Lease (kube-system's hold the
// elections of the cluster's controllers). Deleting the manifest deletes
// it.
const LeaseNamespace = "kube-system"

// LeaseVerbs are what the sweeps do with their Lease, and all the deploy
// grants on it.
var LeaseVerbs = []string{"get", "update"}

// goneAnnotation holds, on the Lease, the nodes sweeps found gone.
const goneAnnotation = Group + "/gone"

// LeaseName is the name of network's sweep Lease.
func LeaseName(network string) string { return "safe-ipam-sweep." + label(network) }

// LeasePath is the API path of network's sweep Lease.
func LeasePath(network string) string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + LeaseNamespace + "/leases/" + LeaseName(network)
}

// Errors of the sweeps.
var (
	// ErrClaimsOff: the API server serves no AddressClaims (their CRD is
	// not applied): no node claims, and there is nothing to sweep.
	ErrClaimsOff = errors.New("the API server serves no AddressClaims")
	// ErrNoLease: AddressClaims are served, but the sweeps' Lease of the
	// network is missing: no node can lead, and a dead node's claims stay.
	ErrNoLease = errors.New("the dead-node sweeps' Lease does not exist")
	// ErrLeadChanged: the Lease names another holder than the sweep read.
	ErrLeadChanged = errors.New("the lead of the dead-node sweeps changed")
)

// lease is a coordination.k8s.io/v1 Lease, as far as the sweeps use it.
type lease struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace,omitempty"`
		ResourceVersion string            `json:"resourceVersion,omitempty"`
		Labels          map[string]string `json:"labels,omitempty"`
		Annotations     map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		HolderIdentity       string `json:"holderIdentity,omitempty"`
		LeaseDurationSeconds int    `json:"leaseDurationSeconds,omitempty"`
		AcquireTime          string `json:"acquireTime,omitempty"`
		RenewTime            string `json:"renewTime,omitempty"`
		LeaseTransitions     int    `json:"leaseTransitions,omitempty"`
	} `json:"spec"`
}

// microTime is the Lease's time format.
const microTime = "2006-01-02T15:04:05.000000Z07:00"

// goneNote is what a sweep noted of a node it found gone: since when, by
// the API server's clock, and the grace it set.
type goneNote struct {
	Since time.Time `json:"since"`
	Grace string    `json:"grace"`
}

// Sweep is the sweeps' Lease of a network as one round read it.
type Sweep struct {
	Network string
	// Leader is the node that sweeps ("" when none does); Leading says
	// whether it is the campaign that read the Lease (another process
	// may lead under the same node name: a stale nodename).
	Leader  string
	Leading bool
	// Gone are the nodes earlier sweeps found gone; Passed is judged by
	// the API server's clock (Now), never a machine's.
	Gone map[string]store.Sighting
	// Now is the API server's clock when the Lease was read.
	Now    time.Time
	holder string // the Lease's holderIdentity
	obj    *lease
}

// Campaign is one process's part in electing the sweeper, kept across the
// rounds of its loop: it sees the leader renew the Lease, and takes it
// over only once the Lease has not changed for its duration by this
// machine's own clock (two machines' clocks are never compared).
type Campaign struct {
	Self   string
	id     string // this process's, beside Self in the holder identity
	seenRV string
	seenAt time.Time
}

// identity is the Lease holder this campaign writes: its node, and a
// random id of this process, as client-go's leader election does.
func (cp *Campaign) identity() string {
	if cp.id == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cp.id = hex.EncodeToString(b[:])
	}
	return cp.Self + "_" + cp.id
}

// Lead reads network's sweep Lease and says who sweeps. With campaign,
// this process takes a Lease nobody holds, or one not renewed for its
// duration, ttl, and renews its own; each write names the
// resourceVersion it read, so of two campaigns one wins. cp nil reads
// without electing (a run by hand).
func (c *Client) Lead(ctx context.Context, network string, cp *Campaign, ttl time.Duration, campaign bool) (*Sweep, error) {
	sw, err := c.readSweep(ctx, network)
	if err != nil || cp == nil {
		return sw, err
	}
	now := time.Now()
	if sw.obj.Metadata.ResourceVersion != cp.seenRV {
		cp.seenRV, cp.seenAt = sw.obj.Metadata.ResourceVersion, now
	}
	me := cp.identity()
	sw.Leading = sw.holder == me
	held := sw.holder != "" && !sw.Leading
	expired := held && now.Sub(cp.seenAt) > time.Duration(sw.obj.Spec.LeaseDurationSeconds)*time.Second
	if !campaign || held && !expired {
		return sw, nil
	}
	obj := sw.leaseObject()
	if !sw.Leading {
		obj.Spec.AcquireTime = now.UTC().Format(microTime)
		obj.Spec.LeaseTransitions++
	}
	obj.Spec.HolderIdentity = me
	obj.Spec.LeaseDurationSeconds = max(1, int(ttl/time.Second))
	// By this machine's clock, to the microsecond, as client-go's: every
	// renewal changes the Lease (the server skips a write that changes
	// nothing), and no one compares it with another clock.
	obj.Spec.RenewTime = now.UTC().Format(microTime)
	if err := c.writeLease(ctx, sw, obj); err != nil {
		if errors.Is(err, kubeapi.ErrConflict) {
			// Another wrote first (a campaign, a run by hand's note):
			// whose is the Lease now?
			return c.Lead(ctx, network, cp, ttl, false)
		}
		return nil, err
	}
	cp.seenRV, cp.seenAt = sw.obj.Metadata.ResourceVersion, now
	sw.holder, sw.Leader, sw.Leading = me, cp.Self, true
	return sw, nil
}

// Resign gives up the lead of network's sweeps, if cp holds it, so that
// another node takes it at once.
func (c *Client) Resign(ctx context.Context, network string, cp *Campaign) error {
	sw, err := c.readSweep(ctx, network)
	if err != nil || sw.holder != cp.identity() {
		return err
	}
	obj := sw.leaseObject()
	obj.Spec.HolderIdentity = ""
	return c.writeLease(ctx, sw, obj)
}

// Note writes what a sweep found: the nodes gone first now (true), and
// the notes to forget (false). It reads the Lease again, so that a node
// is noted gone at the API server's time after the listing that found it
// so, and refuses (ErrLeadChanged) when the Lease names another holder
// than sw: the sweep of a leader that lost the lead writes nothing, and
// releases nothing (a sweep calls Note, notes or none, before it
// releases). The
// write names the resourceVersion it read. A note that does not read is
// dropped (no sighting), never written back.
func (c *Client) Note(ctx context.Context, sw *Sweep, notes map[string]bool, grace time.Duration) error {
	fresh, err := c.readSweep(ctx, sw.Network)
	if err != nil {
		return err
	}
	if fresh.holder != sw.holder {
		return fmt.Errorf("%w: %q holds it now, not %q", ErrLeadChanged, fresh.holder, sw.holder)
	}
	if len(notes) == 0 {
		return nil // the lead checked, nothing to write
	}
	gone := map[string]goneNote{}
	for node, s := range fresh.Gone {
		if !s.Legacy {
			gone[node] = goneNote{Since: s.Since, Grace: s.Grace.String()}
		}
	}
	for node, first := range notes {
		_, noted := gone[node]
		switch {
		case first && !noted: // an earlier note of it (a run by hand's) stands
			gone[node] = goneNote{Since: fresh.Now, Grace: grace.String()}
		case !first:
			delete(gone, node)
		}
	}
	data, err := json.Marshal(gone)
	if err != nil {
		return err
	}
	obj := fresh.leaseObject()
	if obj.Metadata.Annotations == nil {
		obj.Metadata.Annotations = map[string]string{}
	}
	obj.Metadata.Annotations[goneAnnotation] = string(data)
	if err := c.writeLease(ctx, fresh, obj); err != nil {
		return err
	}
	sw.obj, sw.Now, sw.Gone = fresh.obj, fresh.Now, map[string]store.Sighting{}
	for node, n := range gone {
		sw.Gone[node] = sighting(n, fresh.Now)
	}
	return nil
}

// readSweep reads network's Lease, and the API server's clock. A Lease
// that does not exist is ErrNoLease where AddressClaims are served, and
// ErrClaimsOff where they are not.
func (c *Client) readSweep(ctx context.Context, network string) (*Sweep, error) {
	var obj lease
	now, err := c.api.GetDated(ctx, LeasePath(network), &obj)
	if err != nil {
		// Missing or refused: are the claims on at all for this
		// identity? Without deploy/safe-ipam-claims.yaml it may read
		// neither (the API server refuses before it looks).
		var page struct{}
		if perr := c.api.Get(ctx, collection+"?limit=1", &page); perr != nil {
			return nil, sweepError("listing AddressClaims", perr)
		}
		if errors.Is(err, kubeapi.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s/%s (deploy/safe-ipam-claims.yaml creates the one of k8s-pod-network)", ErrNoLease, LeaseNamespace, LeaseName(network))
		}
		return nil, fmt.Errorf("reading the dead-node sweeps' Lease %s/%s: %w", LeaseNamespace, LeaseName(network), err)
	}
	if now.IsZero() {
		return nil, errors.New("reading the dead-node sweeps' Lease: the API server's answer has no Date")
	}
	sw := &Sweep{Network: network, Gone: map[string]store.Sighting{}, Now: now, obj: &obj, holder: obj.Spec.HolderIdentity}
	sw.Leader = sw.holder
	if i := strings.LastIndexByte(sw.holder, '_'); i >= 0 {
		sw.Leader = sw.holder[:i] // a node name may have one too
	}
	var notes map[string]goneNote
	if raw, ok := obj.Metadata.Annotations[goneAnnotation]; ok {
		if err := json.Unmarshal([]byte(raw), &notes); err != nil {
			notes = nil // fail closed: no sighting; the next note replaces them
		}
	}
	for node, n := range notes {
		sw.Gone[node] = sighting(n, now)
	}
	return sw, nil
}

// sighting is a note as evidence at the API server's time now: one that
// does not read (no time, a grace that is not a duration of zero or more)
// is no sighting. The grace has passed once now is more than a grace and
// the Date's second past since: both times are the server's.
func sighting(n goneNote, now time.Time) store.Sighting {
	grace, err := time.ParseDuration(n.Grace)
	s := store.Sighting{Since: n.Since, Grace: grace, Legacy: err != nil || grace < 0 || n.Since.IsZero()}
	s.Passed = !s.Legacy && now.Sub(n.Since) > grace+time.Second
	return s
}

// sweepError wraps err: ErrClaimsOff where the API server serves no
// AddressClaims, or not to this identity (no node with it claims either);
// anything else is a failure to say.
func sweepError(what string, err error) error {
	if errors.Is(err, kubeapi.ErrNoResource) || errors.Is(err, kubeapi.ErrForbidden) {
		return fmt.Errorf("%w: %s: %w", ErrClaimsOff, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// leaseObject is a copy of sw's Lease, to write.
func (sw *Sweep) leaseObject() *lease {
	cp := *sw.obj
	cp.Metadata.Annotations = map[string]string{}
	for k, v := range sw.obj.Metadata.Annotations {
		cp.Metadata.Annotations[k] = v
	}
	return &cp
}

// writeLease updates the Lease from the resourceVersion sw read it at,
// and keeps what the server stored as sw's.
func (c *Client) writeLease(ctx context.Context, sw *Sweep, obj *lease) error {
	var out lease
	if err := c.api.Update(ctx, LeasePath(sw.Network), obj, &out); err != nil {
		return fmt.Errorf("writing the dead-node sweeps' Lease: %w", err)
	}
	sw.obj = &out
	return nil
}

// All lists every AddressClaim, a page at a time, and returns network's,
// and names the objects that do not read (damaged: a caller leaves them
// alone). The dead-node sweep's one listing per period.
func (c *Client) All(ctx context.Context, network string) ([]*Claim, []string, error) {
	all, damaged, err := c.list(ctx, url.Values{}, func(cl *Claim) bool { return cl.Holder.Network == network })
	if err != nil {
		return nil, nil, sweepError("listing AddressClaims", err)
	}
	return all, damaged, nil
}
