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
	Addr       netip.Addr
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

// RemoteQuarantine judges a quarantine whose holder is another node's
// record, known only by that record's claim: standing says the claim the
// mark names is still there, the same object (read from a collection the
// API server was just seen to serve); readErr, that it could not be
// read. It goes, and its allocation is released, only once that claim is
// gone: the holder's release, which the claim's deletion follows.
func RemoteQuarantine(standing bool, readErr error) Verdict {
	switch {
	case readErr != nil:
		return keep("the holder's claim cannot be read: %v", readErr)
	case standing:
		return keep("the holder's claim stands: the holder is not released")
	}
	return release("the holder's claim is gone: the holder was released")
}
