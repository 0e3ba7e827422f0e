package claims

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
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

// LeaseNamespace holds the sweeps' Lease (deploy/safe-ipam-claims.yaml
// grants it there).
const LeaseNamespace = "kube-system"

// LeaseVerbs are what the sweeps do with their Lease, and all the deploy
// grants on Leases.
var LeaseVerbs = []string{"create", "get", "update"}

// goneAnnotation holds, on the Lease, the nodes sweeps found gone.
const goneAnnotation = Group + "/gone"

// LeaseName is the name of network's sweep Lease.
func LeaseName(network string) string { return "safe-ipam-sweep." + label(network) }

func leasePath(network string) string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + LeaseNamespace + "/leases/" + LeaseName(network)
}

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
		RenewTime            string `json:"renewTime,omitempty"`
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
	// Leader sweeps ("" when nobody does).
	Leader string
	// Gone are the nodes earlier sweeps found gone; Passed is judged by
	// the API server's clock (Now), never a machine's.
	Gone map[string]store.Sighting
	// Now is the API server's clock when the Lease was read.
	Now time.Time
	obj *lease // nil: there is none
}

// Campaign is one node's part in electing the sweeper, kept across the
// rounds of its loop: it sees the leader renew the Lease, and takes it
// over only once the Lease has not changed for its duration by this
// machine's own clock (two machines' clocks are never compared).
type Campaign struct {
	Self   string
	seenRV string
	seenAt time.Time
}

// Lead reads network's sweep Lease and says who sweeps. With campaign,
// this node takes a Lease nobody holds, or one not renewed for its
// duration, ttl, and renews its own; each write names the
// resourceVersion it read, so of two nodes campaigning one wins. cp nil
// reads without electing (a run by hand).
func (c *Client) Lead(ctx context.Context, network string, cp *Campaign, ttl time.Duration, campaign bool) (*Sweep, error) {
	sw, err := c.readSweep(ctx, network)
	if err != nil || cp == nil {
		return sw, err
	}
	now := time.Now()
	if sw.obj == nil || sw.obj.Metadata.ResourceVersion != cp.seenRV {
		cp.seenAt = now
		if sw.obj != nil {
			cp.seenRV = sw.obj.Metadata.ResourceVersion
		}
	}
	held := sw.obj != nil && sw.Leader != "" && sw.Leader != cp.Self
	expired := held && now.Sub(cp.seenAt) > time.Duration(sw.obj.Spec.LeaseDurationSeconds)*time.Second
	if !campaign || held && !expired {
		return sw, nil
	}
	// A cluster without claims served has nothing to sweep: no node
	// writes a Lease there (one small read per leader's round).
	var page struct{}
	if err := c.api.Get(ctx, collection+"?limit=1", &page); err != nil {
		return nil, served(fmt.Errorf("listing AddressClaims: %w", err))
	}
	obj := sw.leaseObject()
	obj.Spec.HolderIdentity = cp.Self
	obj.Spec.LeaseDurationSeconds = max(1, int(ttl/time.Second))
	// By this machine's clock, to the microsecond, as client-go's: every
	// renewal changes the Lease (the server skips a write that changes
	// nothing), and no one compares it with another clock.
	obj.Spec.RenewTime = now.UTC().Format(microTime)
	if err := c.writeLease(ctx, sw, obj); err != nil {
		if errors.Is(err, kubeapi.ErrConflict) {
			sw.Leader = "" // another node wrote first: the next round reads who
			return sw, nil
		}
		return nil, err
	}
	cp.seenRV, cp.seenAt = sw.obj.Metadata.ResourceVersion, now
	sw.Leader = cp.Self
	return sw, nil
}

// Resign gives up the lead of network's sweeps, if self holds it, so
// that another node takes it at once.
func (c *Client) Resign(ctx context.Context, network, self string) error {
	sw, err := c.readSweep(ctx, network)
	if err != nil || sw.Leader != self {
		return err
	}
	obj := sw.leaseObject()
	obj.Spec.HolderIdentity = ""
	return c.writeLease(ctx, sw, obj)
}

// Note writes what a sweep found: the nodes gone first now (true), noted
// with grace at the API server's time sw was read at, and the notes to
// forget (false). The write names the resourceVersion sw was read at: a
// Lease changed since (another leader) refuses it.
func (c *Client) Note(ctx context.Context, sw *Sweep, notes map[string]bool, grace time.Duration) error {
	if len(notes) == 0 {
		return nil
	}
	gone := map[string]goneNote{}
	for node, s := range sw.Gone {
		gone[node] = goneNote{Since: s.Since, Grace: s.Grace.String()}
	}
	for node, first := range notes {
		if first {
			gone[node] = goneNote{Since: sw.Now, Grace: grace.String()}
		} else {
			delete(gone, node)
		}
	}
	data, err := json.Marshal(gone)
	if err != nil {
		return err
	}
	obj := sw.leaseObject()
	if obj.Metadata.Annotations == nil {
		obj.Metadata.Annotations = map[string]string{}
	}
	obj.Metadata.Annotations[goneAnnotation] = string(data)
	if err := c.writeLease(ctx, sw, obj); err != nil {
		return err
	}
	for node, first := range notes {
		if first {
			sw.Gone[node] = store.Sighting{Since: sw.Now, Grace: grace}
		} else {
			delete(sw.Gone, node)
		}
	}
	return nil
}

// readSweep reads network's Lease, and the API server's clock.
func (c *Client) readSweep(ctx context.Context, network string) (*Sweep, error) {
	var obj lease
	now, err := c.api.GetDated(ctx, leasePath(network), &obj)
	sw := &Sweep{Network: network, Gone: map[string]store.Sighting{}, Now: now}
	if errors.Is(err, kubeapi.ErrNotFound) {
		return sw, nil
	}
	if err != nil {
		return nil, served(fmt.Errorf("reading the dead-node sweeps' Lease: %w", err))
	}
	if now.IsZero() {
		return nil, errors.New("reading the dead-node sweeps' Lease: the API server's answer has no Date")
	}
	sw.obj, sw.Leader = &obj, obj.Spec.HolderIdentity
	var notes map[string]goneNote
	if raw, ok := obj.Metadata.Annotations[goneAnnotation]; ok {
		if err := json.Unmarshal([]byte(raw), &notes); err != nil {
			// Fail closed: a note that does not read is no sighting, and
			// the next note written replaces it.
			notes = nil
		}
	}
	for node, n := range notes {
		grace, err := time.ParseDuration(n.Grace)
		s := store.Sighting{Since: n.Since, Grace: grace, Legacy: err != nil || n.Since.IsZero()}
		// The grace has passed by the API server's clock: both times are its.
		s.Passed = !s.Legacy && now.Sub(n.Since) >= grace
		sw.Gone[node] = s
	}
	return sw, nil
}

// leaseObject is the Lease to write over sw's: a copy, or a new one.
func (sw *Sweep) leaseObject() *lease {
	obj := &lease{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}
	if sw.obj != nil {
		cp := *sw.obj
		cp.Metadata.Annotations = map[string]string{}
		for k, v := range sw.obj.Metadata.Annotations {
			cp.Metadata.Annotations[k] = v
		}
		obj = &cp
	}
	obj.Metadata.Name, obj.Metadata.Namespace = LeaseName(sw.Network), LeaseNamespace
	// Uninstall deletes it by this label (docs/install.md).
	obj.Metadata.Labels = map[string]string{"app.kubernetes.io/name": "safe-ipam"}
	return obj
}

// writeLease creates obj, or updates it from the resourceVersion sw was
// read at, and keeps what the server stored as sw's.
func (c *Client) writeLease(ctx context.Context, sw *Sweep, obj *lease) error {
	var out lease
	var err error
	if sw.obj == nil {
		err = c.api.Create(ctx, "/apis/coordination.k8s.io/v1/namespaces/"+LeaseNamespace+"/leases", obj, &out)
	} else {
		err = c.api.Update(ctx, leasePath(sw.Network), obj, &out)
	}
	if err != nil {
		return served(fmt.Errorf("writing the dead-node sweeps' Lease: %w", err))
	}
	sw.obj = &out
	return nil
}

// All lists network's claims, of every node, a page at a time, and names
// the objects that do not read (damaged: a caller leaves them alone). The
// dead-node sweep's one listing per period.
func (c *Client) All(ctx context.Context, network string) ([]*Claim, []string, error) {
	return c.list(ctx, url.Values{}, func(cl *Claim) bool { return cl.Holder.Network == network })
}
