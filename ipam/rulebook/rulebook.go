// Package rulebook is the one place that decides whether safe-ipam may
// release or forget a record, and whether a handle's allocations may be
// released in Calico. Every path that frees or forgets (the GC verb,
// `safe-ipam gc`, the elected dead-node sweep, an ADD settling a dead
// holder, audit's releasable findings with repair, doctor's count of
// stale records) gathers its evidence and asks here; none carries a rule
// of its own, so a new path adds evidence, never a rule. docs/design.md
// shows the rules as one table, and the tests run it row by row.
//
// It fails closed: freeing needs positive evidence that the owner is
// gone, from a witness that covers it. No witness, one that speaks for
// another node or another machine, one that lists nothing while there is
// something to judge, or one that would release a large share of the
// cluster at once is never "nothing runs" (incident 003).
package rulebook

import (
	"fmt"
	"net/netip"
	"time"
)

// Verdict is the rulebook's answer: Release, or keep for Why.
type Verdict struct {
	Release bool
	// Wait, with Release false, says the evidence is about to change (a
	// call at work will write again): ask again once it has.
	Wait bool
	// Why says why it is kept, or, when released, on what evidence.
	Why string
}

func keep(format string, args ...any) Verdict {
	return Verdict{Why: fmt.Sprintf(format, args...)}
}

func release(format string, args ...any) Verdict {
	return Verdict{Release: true, Why: fmt.Sprintf(format, args...)}
}

// Names is what a listing's entries name.
type Names int

const (
	// Attachments: each entry is a container's interface (the runtime's
	// valid attachments, a file, the CNI result cache).
	Attachments Names = iota
	// Containers: a container without its interfaces (the CRI API):
	// every interface of a listed container runs.
	Containers
	// Pods: pods and their addresses, no containers (the Kubernetes
	// API): it cannot say that a container stopped.
	Pods
)

// Listing is a witness of what runs: the runtime's valid attachments at
// GC, or a liveness source as read.
type Listing struct {
	Source string
	// Node is the Calico node it speaks for; "" for every node.
	Node string
	// Host is the machine whose runtime it read; "" for a witness bound
	// to no machine (a cluster-wide listing). A machine's runtime says
	// nothing of another machine's sandboxes, even under one node name.
	Host string
	// Former: Node is a Calico name this machine had before (the
	// operator's word, gc --former-node): it speaks only for the records
	// this machine wrote under it, not for those without a host, which
	// another machine that shared the name may have written.
	Former bool
	// FormerHosts are host names this machine had before (the operator's
	// word, gc --former-host: a host rename): the records they wrote are
	// this machine's.
	FormerHosts []string
	Names       Names
	// Entries is how many attachments, containers or pods it lists.
	Entries int
	// SaysNone: it states, in so many words, that nothing runs (CNI GC's
	// empty list of valid attachments, which a runtime sends on purpose,
	// unlike libcni's null for "no sandbox of the network"), so an empty
	// listing is evidence.
	SaysNone bool
	// Lags: it may not list yet a sandbox whose ADD has returned (every
	// witness but the runtime's own GC list).
	Lags bool
	// Attachment, Container, Pod ("namespace.name") and Addr say whether
	// it lists what they are asked; nil lists nothing.
	Attachment func(containerID, ifname string) bool
	Container  func(containerID string) bool
	Pod        func(namespaceDotName string) bool
	Addr       func(netip.Addr) bool
	// PodNamesGap says why it cannot speak for pod names ("" when it can).
	PodNamesGap string
}

// Covers says whether the listing speaks for node. A nil listing covers
// none, and a node-local one never covers an unknown node ("").
func (l *Listing) Covers(node string) bool {
	return l != nil && (l.Node == "" || (node != "" && l.Node == node))
}

func (l *Listing) lists(f func(string, string) bool, a, b string) bool { return f != nil && f(a, b) }

// listsAttachment: a listing of containers lists every interface of a
// listed container; one of pods lists every attachment (it can prove no
// container gone).
func (l *Listing) listsAttachment(containerID, ifname string) bool {
	switch l.Names {
	case Pods:
		return true
	case Containers:
		return l.Container != nil && l.Container(containerID)
	}
	return l.lists(l.Attachment, containerID, ifname)
}

func (l *Listing) listsContainer(containerID string) bool {
	return l.Names == Pods || (l.Container != nil && l.Container(containerID))
}

func (l *Listing) listsPod(pod string) bool { return l.Pod != nil && l.Pod(pod) }

func (l *Listing) listsAddr(a netip.Addr) bool { return l.Addr != nil && l.Addr(a) }

// Death is the evidence that a record's node is gone: Calico's Nodes,
// read now, and what the sweeps noted of it.
type Death struct {
	// Known: Calico's Nodes list the node now.
	Known bool
	// Noted: a sweep found the node gone before, at Since, and set Grace
	// to pass before a later sweep may release its records. Passed says
	// it has, by the store's clock (never a machine's wall clock: one
	// that runs ahead must not shorten the grace).
	Noted  bool
	Since  time.Time
	Grace  time.Duration
	Passed bool
}

// Gone says whether the evidence proves the node gone: not known now,
// and found gone by a sweep at least a grace before. One sighting is
// never enough: a node missing from one listing (re-registering, a
// datastore restored from an older backup) loses nothing. Otherwise it
// says why not.
func (d *Death) Gone(node string) (bool, string) {
	switch {
	case d == nil:
		return false, "no evidence of node " + node + "'s death"
	case d.Known:
		return false, "Calico knows node " + node
	case !d.Noted:
		return false, fmt.Sprintf("node %s is gone, found so first now: a sweep a grace or more later releases its records", node)
	case !d.Passed:
		return false, fmt.Sprintf("node %s is gone since %s: a sweep %s or more after that releases its records", node, d.Since.UTC().Format(time.RFC3339), d.Grace)
	}
	return true, ""
}
