package rulebook

import (
	"net/netip"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// ClaimGrace is how long a node's claim is kept without a committed
// record holding its address: an ADD claims first and commits after, and
// a claim younger than this may be one whose commit is on its way.
const ClaimGrace = time.Minute

// ClaimCase is what a node knows of one cluster-wide claim when it would
// forget it: whose it is, and that node's own record of it.
type ClaimCase struct {
	// Node and Host made the claim; Self and SelfHost judge it. A
	// machine reads only its own records, so only it judges its claims
	// (two machines may share a node name: a stale nodename).
	Node, Host, Self, SelfHost string
	Addr                       netip.Addr
	// Record is Self's record of the claim's attachment (nil: none).
	Record *record.Record
	// Age is the time since the claim was made.
	Age time.Duration
}

// Claim judges whether a claim may be forgotten: only by its own node,
// and only when no record of that node holds the address committed, no
// ADD of the attachment still runs, and the claim is older than
// ClaimGrace. What a crash between a claim and its commit, or a release
// whose claim did not go, leaves.
func Claim(c ClaimCase) Verdict {
	rec := c.Record
	switch {
	case c.Node != c.Self:
		return keep("a claim of node %s: its own gc judges it, from its records", c.Node)
	case c.Host != c.SelfHost:
		return keep("a claim that host %s made under this node's name: that machine's gc judges it, from its records", c.Host)
	case rec != nil && rec.State == record.Committed && rec.Holds(c.Addr):
		return keep("the committed record of %s holds %s", rec.Attachment, c.Addr)
	case rec != nil && rec.State == record.Pending && rec.Owner != nil && rec.Owner.Alive():
		return keep("the ADD of %s (pid %d) still runs", rec.Attachment, rec.Owner.PID)
	case c.Age < ClaimGrace:
		return keep("made %s ago, within %s: its commit may be on its way", c.Age.Round(time.Second), ClaimGrace)
	}
	return release("no record of node %s holds %s committed", c.Self, c.Addr)
}

// RemoteQuarantineGrace is how long the claim a remote quarantine names
// must stay gone before its allocation is released: longer than a gc
// period (5 minutes), in which the holder's own gc claims its record
// again if the claim was deleted behind it (by hand, with its CRD).
const RemoteQuarantineGrace = 10 * time.Minute

// RemoteQuarantineCase is what a gc round knows of an allocation it keeps
// quarantined for another node's (or machine's) holder, known only by
// that holder's claim.
type RemoteQuarantineCase struct {
	// Standing: a claim on the address names the holder now (read from a
	// collection the API server was just seen to serve). ReadErr: it
	// could not be read.
	Standing bool
	ReadErr  error
	// GoneSince is when an earlier round first found it gone (nil:
	// none did), and Now this round's time, by this machine's clock.
	GoneSince *time.Time
	Now       time.Time
	// Grace is how long it must stay gone (RemoteQuarantineGrace, unless
	// the operator says otherwise); even with none, the release comes a
	// round after the one that found it gone.
	Grace time.Duration
}

// RemoteVerdict is RemoteQuarantine's answer: the Verdict, and the note
// to keep of when the claim was first found gone (nil: none).
type RemoteVerdict struct {
	Verdict
	GoneSince *time.Time
}

// RemoteQuarantine judges a remote quarantine. Its allocation is released
// only once the holder's claim was found gone by two rounds at least the
// grace apart: a claim missing once (deleted by hand, its
// CRD applied again) may be claimed again by the holder's gc, which runs
// meanwhile. A claim that stands again forgets the note.
func RemoteQuarantine(c RemoteQuarantineCase) RemoteVerdict {
	grace := c.Grace
	switch {
	case c.ReadErr != nil:
		return RemoteVerdict{keep("the holder's claim cannot be read: %v", c.ReadErr), c.GoneSince}
	case c.Standing:
		return RemoteVerdict{keep("the holder's claim stands: the holder is not released"), nil}
	case c.GoneSince == nil:
		now := c.Now
		return RemoteVerdict{keep("the holder's claim is gone, found so first now: released once still gone %s later", grace), &now}
	case c.Now.Sub(*c.GoneSince) < grace:
		return RemoteVerdict{keep("the holder's claim is gone since %s: released once gone for %s", c.GoneSince.UTC().Format(time.RFC3339), grace), c.GoneSince}
	}
	return RemoteVerdict{release("the holder's claim is gone since %s, for %s or more: the holder was released", c.GoneSince.UTC().Format(time.RFC3339), grace), c.GoneSince}
}
