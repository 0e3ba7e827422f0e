package claims

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// API is what Client asks of the API server: kubeapi.Client's verbs.
type API interface {
	Get(ctx context.Context, path string, v any) error
	Create(ctx context.Context, path string, obj, out any) error
	Delete(ctx context.Context, path, uid, resourceVersion string) error
	Update(ctx context.Context, path string, obj, out any) error
	GetDated(ctx context.Context, path string, v any) (time.Time, error)
	CloseIdleConnections()
}

// Errors of Client beyond the API server's own.
var (
	// ErrNotServed: the API server serves no AddressClaims (the CRD is
	// not installed), or this identity may not write them: claims are
	// off, and the node fences its own records only, as before.
	ErrNotServed = errors.New("AddressClaims are not served to this identity")
	// ErrHeld: another record's claim holds the address (Claim returns it).
	ErrHeld = errors.New("the address is claimed")
)

// Client reads and writes AddressClaims.
type Client struct {
	api API
}

// NewClient is a Client over api.
func NewClient(api API) *Client { return &Client{api: api} }

// Claim creates rec's claim on addr. If a claim on addr exists, it is
// returned with ErrHeld, whoever it names (rec itself, when its commit is
// replayed); when it cannot be read (it does not decode, the read fails),
// ErrHeld comes with no claim: held, by whom is unknown.
func (c *Client) Claim(ctx context.Context, rec *record.Record, addr netip.Addr) (*Claim, error) {
	for attempt := 0; attempt < 3; attempt++ {
		var out object
		err := c.api.Create(ctx, collection, Of(rec, addr).object(), &out)
		if err == nil {
			return out.claim()
		}
		if !errors.Is(err, kubeapi.ErrConflict) {
			return nil, served(fmt.Errorf("claiming %s for %s: %w", addr, rec.Attachment, err))
		}
		cur, err := c.Get(ctx, rec.Network, addr)
		if err != nil {
			return nil, fmt.Errorf("%w, and reading it: %w", ErrHeld, err)
		}
		if cur != nil {
			return cur, ErrHeld
		}
		// Released between the create and the read: try again.
	}
	return nil, fmt.Errorf("%w, and kept changing while claiming %s for %s", ErrHeld, addr, rec.Attachment)
}

// Get reads the claim on addr in network; nil when there is none.
func (c *Client) Get(ctx context.Context, network string, addr netip.Addr) (*Claim, error) {
	var out object
	err := c.api.Get(ctx, collection+"/"+Name(network, addr), &out)
	if errors.Is(err, kubeapi.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, served(fmt.Errorf("reading the claim on %s: %w", addr, err))
	}
	return out.claim()
}

// Release deletes cl if it is still the object it was read as (its UID
// and resourceVersion): a claim replaced or changed since is another's,
// and ErrConflict. One already gone is released.
func (c *Client) Release(ctx context.Context, cl *Claim) error {
	err := c.api.Delete(ctx, collection+"/"+Name(cl.Holder.Network, cl.Addr), cl.UID, cl.ResourceVersion)
	if err == nil || errors.Is(err, kubeapi.ErrNotFound) {
		return nil
	}
	return served(fmt.Errorf("releasing the claim of %s on %s: %w", cl.Holder, cl.Addr, err))
}

// ReleaseOf releases rec's claims on its addresses: each one its record
// made (MadeFor), read and then deleted with that read's preconditions. A claim of
// another attachment stays. It goes on past a failure and returns the
// first.
func (c *Client) ReleaseOf(ctx context.Context, rec *record.Record) error {
	var first error
	for _, ip := range rec.IPs {
		addr, ok := record.ParseAddr(ip)
		if !ok {
			continue
		}
		cl, err := c.Get(ctx, rec.Network, addr)
		// chaos:claims-released-by-name (a mutant breaks what follows)
		if err == nil && cl != nil && cl.MadeFor(rec) {
			err = c.Release(ctx, cl)
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// OfNode lists the claims of node's records in network, a page at a
// time, and names the objects under node's label that do not read
// (damaged: a caller leaves them alone).
func (c *Client) OfNode(ctx context.Context, network, node string) ([]*Claim, []string, error) {
	out, damaged, err := c.list(ctx, url.Values{"labelSelector": {NodeLabel + "=" + label(node)}}, func(cl *Claim) bool {
		return cl.Node == node && cl.Holder.Network == network
	})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the claims of node %s: %w", node, err)
	}
	return out, damaged, nil
}

// list lists the claims q selects that keep says to, 500 a page, and
// names the objects that do not read.
func (c *Client) list(ctx context.Context, q url.Values, keep func(*Claim) bool) ([]*Claim, []string, error) {
	var out []*Claim
	var damaged []string
	cont := ""
	q.Set("limit", "500")
	for {
		if cont != "" {
			q.Set("continue", cont)
		}
		var list struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []object `json:"items"`
		}
		if err := c.api.Get(ctx, collection+"?"+q.Encode(), &list); err != nil {
			return nil, nil, served(fmt.Errorf("listing AddressClaims: %w", err))
		}
		for i := range list.Items {
			cl, err := list.Items[i].claim()
			switch {
			case err != nil:
				damaged = append(damaged, list.Items[i].Metadata.Name)
			case keep(cl):
				out = append(out, cl)
			}
		}
		if cont = list.Metadata.Continue; cont == "" {
			return out, damaged, nil
		}
	}
}

// served wraps err in ErrNotServed when the API server serves no
// AddressClaims or refuses this identity.
func served(err error) error {
	if errors.Is(err, kubeapi.ErrNoResource) || errors.Is(err, kubeapi.ErrForbidden) {
		return fmt.Errorf("%w: %w", ErrNotServed, err)
	}
	return err
}

// Close closes the API server's idle connections.
func (c *Client) Close() { c.api.CloseIdleConnections() }
