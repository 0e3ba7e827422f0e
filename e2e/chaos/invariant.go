package chaos

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Kind is the harm a violation does: an address lost to the pool, or an
// address two pods can end up holding.
type Kind string

// Kinds of harm.
const (
	Lost       Kind = "lost"
	Duplicated Kind = "duplicated"
	// Blocked: fencing failed an ADD on state that was not live (a holder
	// the runtime deleted, or whose node died), or left a record or
	// quarantine that would: safe-ipam worse than Calico alone.
	Blocked Kind = "blocked"
)

// The invariants, numbered as in the issue.
const (
	// InvOneHolder: no address is held by two live attachments, and no
	// live attachment's address is free in Calico.
	InvOneHolder = 1
	// InvReleased: once the runtime's DEL or GC of an attachment
	// succeeded, Calico holds nothing for it and no record is kept.
	InvReleased = 2
	// InvOwnRelease: a DEL (or GC) never releases an address of another
	// container.
	InvOwnRelease = 3
	// InvNotBlocked: an ADD fails on a fence only while the holder is
	// live (or owed its DEL or GC), and at quiescence nothing of safe-ipam's
	// is left to fence with.
	InvNotBlocked = 4
)

// Violation is one broken invariant, with the address and attachment (or
// handle) it concerns.
type Violation struct {
	Invariant int
	Kind      Kind
	Subject   string
	IP        netip.Addr
	Detail    string
}

func (v Violation) String() string {
	ip := ""
	if v.IP.IsValid() {
		ip = " " + v.IP.String()
	}
	return fmt.Sprintf("invariant %d (%s) %s%s: %s", v.Invariant, v.Kind, v.Subject, ip, v.Detail)
}

// harm identifies the damage, so that one freed address seen by several
// checks and at several steps counts once.
func (v Violation) harm() string { return fmt.Sprintf("%s|%s|%s", v.Kind, v.Subject, v.IP) }

// checker checks one observation against the model.
type checker struct {
	m     *Model
	obs   *Observation
	held  map[netip.Addr]calicosim.Allocation
	found []Violation
}

func newChecker(m *Model, obs *Observation) *checker {
	return &checker{m: m, obs: obs, held: heldAddresses(obs)}
}

func heldAddresses(obs *Observation) map[netip.Addr]calicosim.Allocation {
	held := map[netip.Addr]calicosim.Allocation{}
	for _, a := range obs.Calico.Allocations() {
		held[a.IP] = a
	}
	return held
}

func (c *checker) report(inv int, kind Kind, subject string, ip netip.Addr, format string, args ...any) {
	c.found = append(c.found, Violation{Invariant: inv, Kind: kind, Subject: subject, IP: ip, Detail: fmt.Sprintf(format, args...)})
}

// CheckStep checks the state after a step. prev is the state before it, and
// named are the attachments the step's calls concerned: only they may
// have lost addresses during it.
func CheckStep(m *Model, prev, obs *Observation, named map[*Attachment]bool) []Violation {
	c := newChecker(m, obs)
	c.calicoConsistent()
	c.liveHoldTheirAddresses()
	c.noSharedAddresses()
	c.everyHandleOwned()
	c.releasedLeaveNothing()
	if m.Setup.Safe() {
		c.recordsAgree()
	}
	if m.Setup.Kube() {
		c.claimsAgree()
	}
	if prev != nil {
		c.onlyNamedReleased(prev, named)
	}
	return c.found
}

// CheckDrained checks the state once the runtime has deleted (or collected)
// every attachment: nothing may remain.
func CheckDrained(m *Model, obs *Observation) []Violation {
	c := newChecker(m, obs)
	c.calicoConsistent()
	for _, a := range obs.Calico.Allocations() {
		c.report(InvReleased, Lost, "handle "+a.Handle, a.IP, "still allocated after the runtime deleted every attachment")
	}
	for h, doc := range obs.Calico.Handles {
		if doc.Total() > 0 {
			c.report(InvReleased, Lost, "handle "+h, netip.Addr{}, "handle document left after every attachment was deleted")
		}
	}
	for att, r := range obs.Records {
		if a := m.find(att.Network, att.ContainerID, att.IfName); a != nil && a.Gone {
			c.report(InvNotBlocked, Blocked, att.String(), netip.Addr{}, "%s record of node %s, which died, left at the end: it fences its addresses for ever", r.State, a.Node)
			continue
		}
		c.report(InvReleased, Lost, att.String(), netip.Addr{}, "%s record left after every attachment was deleted", r.State)
	}
	for _, cl := range obs.Claims {
		c.report(InvNotBlocked, Blocked, cl.Holder.String(), cl.Addr, "claim left after every attachment was deleted: it fences an address Calico hands out")
	}
	return c.found
}

// claimsAgree checks the claims on Calico's Kubernetes datastore: a live
// attachment's committed record has its addresses claimed in its name
// (else another node's ADD given one starts with it), and no claim names
// an attachment the runtime deleted (it would fence an address Calico
// hands out) or never made.
func (c *checker) claimsAgree() {
	byAddr := map[netip.Addr]*claims.Claim{}
	for _, cl := range c.obs.Claims {
		byAddr[cl.Addr] = cl
		a := c.m.find(cl.Holder.Network, cl.Holder.ContainerID, cl.Holder.IfName)
		switch {
		case a == nil:
			c.report(InvNotBlocked, Blocked, cl.Holder.String(), cl.Addr, "claim of an attachment the runtime never made: it fences an address Calico hands out")
		case a.State == Deleted:
			c.report(InvNotBlocked, Blocked, a.String(), cl.Addr, "claim kept after the runtime's DEL or GC succeeded: it fences an address Calico hands out")
		}
	}
	for _, a := range c.m.Atts {
		r := c.obs.Records[record.Attachment{Network: Network, ContainerID: a.ContainerID, IfName: a.IfName}]
		if !a.live() || r == nil || r.State != record.Committed {
			continue // a victim's claim stands too: it is what fences its address
		}
		for _, ip := range recordAddrs(r) {
			if cl := byAddr[ip]; cl == nil || cl.Holder != r.Attachment || cl.Node != r.Node {
				c.report(InvOneHolder, Duplicated, a.String(), ip, "no claim names the live attachment's address (%s): another node's ADD given it would start with it", describeClaim(cl))
			}
		}
	}
}

func describeClaim(cl *claims.Claim) string {
	if cl == nil {
		return "none"
	}
	return fmt.Sprintf("claimed by %s on %s", cl.Holder, cl.Node)
}

// calicoConsistent: Calico's own writes never leave handles and blocks
// disagreeing; if they do, the simulator is broken, not safe-ipam.
func (c *checker) calicoConsistent() {
	for _, s := range c.obs.Calico.Inconsistencies() {
		c.report(0, Lost, "calico", netip.Addr{}, "Calico's data is inconsistent: %s", s)
	}
}

// liveHoldTheirAddresses is invariant 1: a live attachment's address is
// allocated, to its own handle.
func (c *checker) liveHoldTheirAddresses() {
	for _, a := range c.m.Atts {
		if !a.live() || a.Victim {
			continue // an outside actor freed a victim's address; noSharedAddresses judges it
		}
		want := c.m.Handle(a)
		for _, ip := range a.IPs {
			got, ok := c.held[ip]
			switch {
			case !ok:
				c.report(InvOneHolder, Duplicated, a.String(), ip, "the live attachment's address is free in Calico: the next ADD can hand it out")
			case got.Handle != want:
				c.report(InvOneHolder, Duplicated, a.String(), ip, "the live attachment's address is held by handle %s, not %s", got.Handle, want)
			}
		}
	}
}

// noSharedAddresses is invariant 1: the runtime never believes two live
// attachments have the same address.
func (c *checker) noSharedAddresses() {
	holders := map[netip.Addr][]string{}
	for _, a := range c.m.Atts {
		if a.live() {
			for _, ip := range a.IPs {
				holders[ip] = append(holders[ip], a.String())
			}
		}
	}
	for ip, hs := range holders {
		if len(hs) > 1 {
			c.report(InvOneHolder, Duplicated, "address", ip, "held by live attachments %s", strings.Join(hs, ", "))
		}
	}
}

// everyHandleOwned: with safe-ipam every allocation is under one
// attachment's own handle. A pod-name handle is one any incarnation's DEL
// releases (invariant 1); a handle nobody owns is an address lost.
func (c *checker) everyHandleOwned() {
	if !c.m.Setup.Safe() {
		return // calico-ipam alone uses pod-name handles by design: that is the control
	}
	owners := c.m.byHandle()
	pods := map[string]bool{}
	for _, a := range c.m.Atts {
		pods[podHandle(a.Pod)] = true
	}
	for _, al := range c.obs.Calico.Allocations() {
		switch {
		case len(owners[al.Handle]) == 1:
		case pods[al.Handle]:
			c.report(InvOneHolder, Duplicated, "handle "+al.Handle, al.IP, "allocated under a pod-name handle, which every incarnation's DEL releases")
		default:
			c.report(InvReleased, Lost, "handle "+al.Handle, al.IP, "allocated under a handle no attachment owns")
		}
	}
}

// releasedLeaveNothing is invariant 2 for each attachment the runtime
// has deleted: Calico holds nothing under its handle.
func (c *checker) releasedLeaveNothing() {
	if !c.m.HandleIsOwn() {
		return // a shared pod-name handle cannot be attributed; Drained checks the end
	}
	quarantinable := c.m.quarantinable()
	live := c.m.byHandle()
	for _, a := range c.m.Atts {
		if a.State != Deleted && !a.Gone || a.Alone && len(live[c.m.Handle(a)]) > 0 {
			continue // running, or its pod-name handle is its pod's next incarnation's now
		}
		for _, al := range c.obs.Calico.AllocationsOf(c.m.Handle(a)) {
			if quarantinable[al.IP] {
				continue // a quarantine, released with the victim that holds the address
			}
			if h := a.QuarantinedBy; h != nil && h.Gone && slices.Contains(h.IPs, al.IP) && c.m.needsDeadNodesGC() {
				continue // quarantined with a dead node's record, which the sweep releases with it
			}
			c.report(InvReleased, Lost, a.String(), al.IP, "Calico still holds the address of an attachment the runtime deleted")
		}
	}
}

// recordsAgree checks safe-ipam's records against the model and Calico:
// a live attachment has its committed record, a deleted one none, and a
// committed record names only addresses Calico holds for it (else an
// ADD retry would replay a freed address).
func (c *checker) recordsAgree() {
	for _, a := range c.m.Atts {
		r := c.obs.Records[record.Attachment{Network: Network, ContainerID: a.ContainerID, IfName: a.IfName}]
		switch {
		case a.Gone && c.m.deadCollected && r != nil:
			c.report(InvNotBlocked, Blocked, a.String(), netip.Addr{}, "%s record of node %s, which died, outlived a gc --dead-nodes that succeeded", r.State, a.Node)
		case a.Unrecorded || c.m.uninstalled[a.Node]:
			// ADDed, or DELed, by calico-ipam alone: no record to agree with.
		case a.live() && (r == nil || r.State != record.Committed):
			c.report(InvReleased, Lost, a.String(), netip.Addr{}, "live attachment has no committed record (%s): GC could never release it", describeRecord(r))
		case a.live() && !sameAddrs(recordAddrs(r), a.IPs):
			c.report(InvOneHolder, Duplicated, a.String(), netip.Addr{}, "record holds %v, ADD returned %v", r.IPs, a.IPs)
		case a.State == Deleted && r != nil:
			c.report(InvReleased, Lost, a.String(), netip.Addr{}, "%s record kept after the runtime's DEL or GC succeeded", r.State)
		}
	}
	for att, r := range c.obs.Records {
		a := c.m.find(att.Network, att.ContainerID, att.IfName)
		if a == nil {
			c.report(InvReleased, Lost, att.String(), netip.Addr{}, "record for an attachment the runtime never made")
			continue
		}
		c.committedRecordHolds(a, r)
	}
}

func (c *checker) committedRecordHolds(a *Attachment, r *record.Record) {
	if r.State != record.Committed || a.Victim || a.Gone {
		return // an outside actor, or a dead node's kube-controllers, freed its addresses; the record waits to be settled
	}
	want := c.m.Handle(a)
	if r.Handle != want {
		c.report(InvOneHolder, Duplicated, a.String(), netip.Addr{}, "record names handle %s, calico-ipam allocates under %s", r.Handle, want)
	}
	for _, ip := range recordAddrs(r) {
		if got, ok := c.held[ip]; !ok || got.Handle != want {
			c.report(InvOneHolder, Duplicated, a.String(), ip, "committed record names an address Calico does not hold for it (holder %q): an ADD retry would replay it", got.Handle)
		}
	}
}

// onlyNamedReleased is invariant 3: every address freed (or moved to
// another handle) during the step belonged to an attachment the step
// named, never to a live one it did not.
func (c *checker) onlyNamedReleased(prev *Observation, named map[*Attachment]bool) {
	owner := map[netip.Addr]*Attachment{}
	for _, a := range c.m.Atts {
		if a.live() && !named[a] {
			for _, ip := range a.IPs {
				owner[ip] = a
			}
		}
	}
	for ip, before := range heldAddresses(prev) {
		after, still := c.held[ip]
		a := owner[ip]
		if still && (after.Handle == before.Handle || a != nil && after.Handle == c.m.Handle(a)) {
			continue // unchanged, or moved under its live owner's own handle (uninstall's re-claim)
		}
		if a != nil && c.heldFor(prev, a, before.Handle) {
			c.report(InvOwnRelease, Duplicated, a.String(), ip, "released by a call for another container while %s was live", a)
		}
	}
}

// heldFor says whether handle held its address for a: a's own handle, or
// for a victim of an outside actor, the handle of an allocation fencing
// quarantined for it. An ADD that crashed before its commit may also hold
// a victim's address, under a pending record; releasing that puts the
// address back where the outside actor left it, and fencing stops the
// next ADD again.
func (c *checker) heldFor(prev *Observation, a *Attachment, handle string) bool {
	if !a.Victim || handle == c.m.Handle(a) {
		return true
	}
	r := prev.Records[record.Attachment{Network: Network, ContainerID: a.ContainerID, IfName: a.IfName}]
	if r == nil {
		return false
	}
	for _, q := range r.Quarantined {
		if qa := c.m.find(q.Network, q.ContainerID, q.IfName); qa != nil && c.m.Handle(qa) == handle {
			return true
		}
	}
	return false
}

func describeRecord(r *record.Record) string {
	if r == nil {
		return "none"
	}
	return string(r.State)
}

func recordAddrs(r *record.Record) []netip.Addr {
	var out []netip.Addr
	for _, s := range r.IPs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Addr())
		} else if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func sameAddrs(a, b []netip.Addr) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, func(p, q netip.Addr) int { return p.Compare(q) })
	slices.SortFunc(y, func(p, q netip.Addr) int { return p.Compare(q) })
	return slices.Equal(x, y)
}
