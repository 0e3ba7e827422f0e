package audit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Claim findings (Calico's Kubernetes datastore, where each node's
// records stay in its file store and their addresses are claimed
// cluster-wide: docs/design.md).
const (
	// Unclaimed: a committed record of this node holds an address no
	// claim names, so it is fenced on this node only.
	Unclaimed Kind = "unclaimed"
	// OrphanClaim: a claim of this machine's that no record of it holds,
	// which fences its address on every node.
	OrphanClaim Kind = "orphan-claim"
)

// ClaimsSeen is what the audit read of the cluster-wide claims: this
// machine's (its node name and host) and, for each address of its
// records that none of them names, the claim on it (nil: none).
type ClaimsSeen struct {
	Own    []*claims.Claim
	OnAddr map[netip.Addr]*claims.Claim
	// Damaged names the objects under this node's label that do not read.
	Damaged []string
}

// asClaimed are recs as this machine claims them (claims.Store): a record
// an older safe-ipam wrote names no host, and a file store holds its own
// machine's records, claimed under host.
func asClaimed(recs []*record.Record, host string) []*record.Record {
	out := make([]*record.Record, len(recs))
	for i, rec := range recs {
		out[i] = rec
		if rec.Host == "" {
			mine := *rec
			mine.Host = host
			out[i] = &mine
		}
	}
	return out
}

// JudgeClaims compares this machine's committed records (host's, which
// claimed them: asClaimed) with the claims seen: a record's address that no claim names is unclaimed (gc --apply
// claims it at its next round), or held by another attachment's claim (a
// duplicate across nodes: two running pods may share it); a claim of this
// machine's that no record names is an orphan (gc --apply forgets it).
// Records and claims younger than minAge are an ADD or DEL at work and
// are not judged.
func JudgeClaims(recs []*record.Record, seen ClaimsSeen, host string, minAge time.Duration, now time.Time) []Finding {
	recs = asClaimed(recs, host)
	var out []Finding
	for _, rec := range recs {
		if rec.State != record.Committed || now.Sub(rec.Created) < minAge {
			continue
		}
		for _, addr := range recordAddrs(rec) {
			if claimedBy(seen.Own, rec, addr) {
				continue
			}
			switch cl, ok := seen.OnAddr[addr]; {
			case !ok || cl == nil:
				out = append(out, Finding{Kind: Unclaimed, Address: addr.String(), Handle: rec.Handle, Node: rec.Node, Records: []string{rec.Attachment.String()},
					Why: "no AddressClaim names the record: its address is fenced on this node only until gc --apply claims it"})
			case !cl.Names(rec):
				out = append(out, Finding{Kind: Duplicate, Address: addr.String(), Handle: rec.Handle, Node: rec.Node,
					Records: []string{rec.Attachment.String(), cl.Holder.String() + " on node " + cl.Node},
					Why:     fmt.Sprintf("the record holds the address while the AddressClaim on it names %s on node %s: two running pods may share it", cl.Holder, cl.Node)})
			}
		}
	}
	for _, cl := range seen.Own {
		if now.Sub(cl.Created) < minAge || heldByRecord(recs, cl) {
			continue
		}
		out = append(out, Finding{Kind: OrphanClaim, Address: cl.Addr.String(), Handle: cl.Handle, Node: cl.Node, Records: []string{cl.Holder.String()},
			Why: "an AddressClaim of this machine's that no record holds: it fences the address on every node until gc --apply forgets it"})
	}
	for _, name := range seen.Damaged {
		out = append(out, Finding{Kind: Inconsistent, Records: []string{"AddressClaim " + name}, Why: "an AddressClaim under this node's label does not decode: gc leaves it alone; delete it by hand once its address is known free"})
	}
	return out
}

func recordAddrs(rec *record.Record) []netip.Addr {
	var out []netip.Addr
	for _, ip := range rec.IPs {
		if addr, ok := record.ParseAddr(ip); ok {
			out = append(out, addr)
		}
	}
	return out
}

func claimedBy(own []*claims.Claim, rec *record.Record, addr netip.Addr) bool {
	for _, cl := range own {
		if cl.Addr == addr && cl.Names(rec) {
			return true
		}
	}
	return false
}

func heldByRecord(recs []*record.Record, cl *claims.Claim) bool {
	for _, rec := range recs {
		if rec.State == record.Committed && cl.Names(rec) && rec.Holds(cl.Addr) {
			return true
		}
	}
	return false
}

// ReadClaims reads what JudgeClaims compares: this machine's claims in
// network (one listing under its node's label), then the claim on each
// address of recs that none of them names (one read each: few, unless
// the claims are missing). Claims not served is claims.ErrNotServed.
func ReadClaims(ctx context.Context, c *claims.Client, recs []*record.Record, network, node, host string) (ClaimsSeen, error) {
	listed, damaged, err := c.OfNode(ctx, network, node)
	if err != nil {
		return ClaimsSeen{}, err
	}
	recs = asClaimed(recs, host)
	seen := ClaimsSeen{OnAddr: map[netip.Addr]*claims.Claim{}, Damaged: damaged}
	for _, cl := range listed {
		if cl.Host == host {
			seen.Own = append(seen.Own, cl)
		}
	}
	for _, rec := range recs {
		if rec.State != record.Committed {
			continue
		}
		for _, addr := range recordAddrs(rec) {
			if _, read := seen.OnAddr[addr]; read || claimedBy(seen.Own, rec, addr) {
				continue
			}
			cl, err := c.Get(ctx, network, addr)
			if err != nil {
				return ClaimsSeen{}, err
			}
			seen.OnAddr[addr] = cl
		}
	}
	return seen, nil
}

// errNoClaims says why the audit compared no claims.
var errNoClaims = errors.New("AddressClaims are not served to Calico's CNI identity (deploy/safe-ipam-claims.yaml not applied?): the records were not compared with the cluster-wide claims")
