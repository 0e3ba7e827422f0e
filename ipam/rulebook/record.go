package rulebook

import (
	"fmt"
	"slices"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Witness is what a path knows besides the records it judges: the
// witnesses of what runs, the store's kind, the clock and the grace.
type Witness struct {
	// Node is the node whose records are judged, for a record that does
	// not name its node (an older safe-ipam's); "" uses the record's. A
	// store that is not shared (a file store) holds this machine's records
	// whatever node name each was written under (a Calico rename): they
	// are all Node's.
	Node string
	// Shared says the store holds more than one machine's records (etcd,
	// keyed by Calico node name, which two machines may share: a stale
	// nodename). A file store is one machine's, whatever its host name
	// says now: a host rename keeps its records its own.
	Shared bool
	// The witnesses: a listing of what runs, or the records' node's death.
	// With neither, nothing is released.
	Listing *Listing
	Death   *Death
	Now     time.Time
	// Grace is the config's gcGracePeriod.
	Grace time.Duration
	// Forget: the record goes without a DEL (repair); only a committed
	// record may, since a pending or releasing one is an ADD or DEL at
	// work, which settles it.
	Forget bool
	// OwnerRuns says whether the process a record names still runs; nil
	// asks the record (record.Owner.Alive).
	OwnerRuns func(*record.Owner) bool
}

// Judge judges rec on w's evidence (Record).
func (w Witness) Judge(rec *record.Record) Verdict {
	return Record(RecordCase{Witness: w, Record: rec})
}

// RecordCase is what a path knows of one record when it would release it
// (mark, delegate DEL, forget: GC, gc, the sweep, a dead holder) or
// forget it without a DEL (repair's orphan records).
type RecordCase struct {
	Witness
	Record *record.Record
}

// Record judges one record. The rules, in order (docs/design.md, "The
// rulebook"):
//
//	R1 no witness                                     keep
//	R2 a death witness, the record names no node      keep (damaged)
//	R3 a listing that does not cover the record's node keep
//	R4 a listing of pods                              keep (no container is proven gone)
//	R5 a machine's listing, a shared store, a record
//	   another machine wrote (for a former name: one
//	   this machine did not write; a former host name
//	   of this machine's is this machine)             keep (a stale nodename)
//	R6 the listing lists the attachment               keep
//	R7 pending, and its ADD's process runs            keep
//	R8 pending for less than gcGracePeriod            keep
//	R9 a listing that lags, written < gcGracePeriod   keep
//	R10 the node is not proven gone (Death.Gone)      keep
//	R11 forget, and the record is not committed       keep
//	otherwise                                         release
func Record(c RecordCase) Verdict {
	rec, l := c.Record, c.Listing
	switch {
	case l == nil && c.Death == nil:
		return keep("no witness says what runs: an unknown set of running pods never means none run")
	case l == nil && rec.Node == "":
		return keep("damaged (it does not decode), so it names no node and no node's death is evidence against it; its own node's DEL or GC releases it")
	case l != nil && !l.Covers(c.node()):
		return keep("%s speaks for node %q, not the record's node %q", l.Source, l.Node, c.node())
	case l != nil && l.Names == Pods:
		return keep("%s names pods, not containers: it cannot prove a container gone", l.Source)
	case l != nil && c.otherHost():
		return keep("written by host %s under this node's Calico name: a stale nodename? %s reads host %s's runtime only", HostName(rec.Host), l.Source, l.Host)
	// chaos:gc-ignores-valid-list (a mutant breaks what follows)
	case l != nil && l.listsAttachment(rec.ContainerID, rec.IfName):
		return keep("listed as running")
	case rec.State == record.Pending && c.ownerRuns(rec.Owner):
		return keep("pending: the ADD that wrote it still runs")
	case rec.State == record.Pending && c.Now.Sub(rec.Created) < c.Grace:
		return keep("pending for less than gcGracePeriod (%s): an ADD in flight", c.Grace)
	case l != nil && l.Lags && c.Now.Sub(LastWritten(rec)) < c.Grace:
		return keep("written less than gcGracePeriod (%s) ago: its sandbox may not be listed yet", c.Grace)
	}
	if l == nil {
		if gone, why := c.Death.Gone(rec.Node); !gone {
			return keep("%s", why)
		}
	}
	if c.Forget && rec.State != record.Committed {
		return keep("a %s record is a DEL or ADD at work: its DEL, ADD or GC settles it", rec.State)
	}
	if l == nil {
		return release("node %s is gone: Calico has no Node %s", rec.Node, rec.Node)
	}
	return release("not listed by %s", l.Source)
}

func (c RecordCase) node() string {
	if c.Record.Node != "" && (c.Shared || c.Node == "") {
		return c.Record.Node
	}
	return c.Node
}

// otherHost: the listing reads one machine's runtime, the store holds
// several machines' records, and another machine wrote this one. A
// record without a host (an older safe-ipam's) is judged as before,
// except under a former name, which other machines may have shared.
func (c RecordCase) otherHost() bool {
	h, l := c.Record.Host, c.Listing
	return c.Shared && l.Host != "" && (h != "" || l.Former) && h != l.Host && !slices.Contains(l.FormerHosts, h)
}

func (c RecordCase) ownerRuns(o *record.Owner) bool {
	if c.OwnerRuns != nil {
		return c.OwnerRuns(o)
	}
	return o.Alive()
}

// LastWritten is when rec was created or last changed.
func LastWritten(rec *record.Record) time.Time {
	if rec.Updated.After(rec.Created) {
		return rec.Updated
	}
	return rec.Created
}

// HostName names the host that wrote a record, for people.
func HostName(host string) string {
	if host == "" {
		return "(none: an older safe-ipam's record)"
	}
	return host
}

// OtherHosts are the hosts other than the listing's that wrote some of
// recs in a shared store: machines sharing this node's Calico name, whose
// records every collection keeps.
func OtherHosts(l *Listing, shared bool, recs []*record.Record) []string {
	var hosts []string
	seen := map[string]bool{}
	for _, rec := range recs {
		c := RecordCase{Witness: Witness{Listing: l, Shared: shared}, Record: rec}
		if l != nil && c.otherHost() && !seen[rec.Host] {
			seen[rec.Host] = true
			hosts = append(hosts, HostName(rec.Host))
		}
	}
	return hosts
}

// TrustListing says why a listing is no evidence for recs at all (""
// when it is): it speaks for another node, names no containers, or lists
// nothing while records it would judge exist (a runtime that lost its
// state, or a wrongly mounted socket, looks empty: incident 003). Records
// another machine wrote are not judged by it, so they do not count.
func TrustListing(l *Listing, node string, shared bool, recs []*record.Record) string {
	switch {
	case l == nil:
		return "no witness says what runs"
	case !l.Covers(node):
		return fmt.Sprintf("%s speaks for node %q, not %q", l.Source, l.Node, node)
	case l.Names == Pods:
		return fmt.Sprintf("%s names pods, not containers: it cannot prove a container gone", l.Source)
	}
	judged := 0
	for _, rec := range recs {
		if !(RecordCase{Witness: Witness{Listing: l, Shared: shared}, Record: rec}).otherHost() {
			judged++
		}
	}
	return TrustEmpty(l, node, fmt.Sprintf("%d records it would judge", judged), judged)
}

// TrustEmpty says why a listing that lists nothing is no evidence (""
// when it is, or lists something): held things on its node (held of
// them, described by what) say something ran there, and an empty answer
// is not taken for "nothing runs" unless the source says so (SaysNone):
// a runtime that lost its state, or a wrongly mounted socket or
// directory, looks empty too (incident 003).
func TrustEmpty(l *Listing, node, what string, held int) string {
	if l.Entries > 0 || l.SaysNone || held == 0 {
		return ""
	}
	where := "node " + node
	if node == "" {
		where = "the nodes it covers"
	}
	return fmt.Sprintf("%s lists nothing running while %s has %s; an empty answer is not taken for \"nothing runs\" (a runtime that lost its state, or a wrongly mounted socket or directory, looks the same)",
		l.Source, where, what)
}

// Uninstall is what uninstall knows when it would forget a record: the
// machine's host names (now first, then the ones it had before a host
// rename, the operator's word), the store's kind, and the clock against
// the longest a CNI call lives (config.Config.CallLifetime).
type Uninstall struct {
	Hosts        []string
	Shared       bool
	Now          time.Time
	CallLifetime time.Duration
}

// UninstallForgets judges whether uninstall may forget rec, read under
// its node's Calico name. In a store machines share, a record another
// machine wrote there (a stale nodename) is that machine's, whose
// safe-ipam still fences its addresses and releases it on its pod's DEL;
// forgotten (and re-keyed in pod mode), its running pods would lose their
// fence and leak their addresses. A record without a host (an older
// safe-ipam's) is forgotten: kept, nothing would release it once this
// machine's pods are deleted through Calico alone, and forgetting costs
// another machine's pod its fence only. A pending or releasing record
// last written within a call's lifetime may be an ADD or DEL begun before
// Calico's files came back (a pending or releasing record is a call at
// work, as for repair): forgotten under it, that ADD's commit fails and
// its pod start with it, so uninstall waits for the call to end and
// judges what it left. A record dated later than now (the clock stepped
// back) is no call's: waiting would not end.
func UninstallForgets(rec *record.Record, u Uninstall) Verdict {
	hosts := u.Hosts
	age := u.Now.Sub(LastWritten(rec))
	switch {
	case u.Shared && rec.Host != "" && len(hosts) > 0 && hosts[0] != "" && !slices.Contains(hosts, rec.Host):
		return keep("written by host %s under this node's Calico name: a stale nodename? That machine's safe-ipam releases it", rec.Host)
	case rec.State != record.Committed && age >= 0 && age < u.CallLifetime:
		return Verdict{Wait: true, Why: fmt.Sprintf("a %s record written %s ago: its ADD or DEL may still run (a call lives up to %s); uninstall waits for it", rec.State, age.Round(time.Millisecond), u.CallLifetime)}
	}
	return release("this machine's record: uninstall forgets it")
}

// UninstallQuarantines judges the quarantines of holder when uninstall
// forgets it (no DEL of safe-ipam will come for them): they may be
// released only when holder's DEL or GC had begun (releasing), which would
// have released them, or when the operator says so (--release-quarantines).
// Any other holder is taken to run (fail closed: a committed record is no
// evidence its pod is gone), so its quarantined addresses stay allocated,
// re-claimed for it.
func UninstallQuarantines(holder *record.Record, operatorSays bool) Verdict {
	switch {
	case holder.State == record.Releasing:
		return release("the DEL or GC of %s had begun: released as that DEL would have", holder.Attachment)
	case operatorSays:
		return release("--release-quarantines: released on the operator's word, although %s is taken to run", holder.Attachment)
	}
	return keep("%s is taken to run (a %s record): its quarantined addresses stay allocated, re-claimed for it", holder.Attachment, holder.State)
}
