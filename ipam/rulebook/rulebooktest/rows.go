// Package rulebooktest is the rulebook's table of record cases, for every
// path that releases or forgets a record to run through its own way of
// gathering evidence: a path that answers a row differently from the
// rulebook has a rule of its own, or lacks one.
package rulebooktest

import (
	"fmt"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Row is one record case a path can be given: a record, what a listing
// of this machine's runtime says of it, and whether the rulebook lets it
// go.
type Row struct {
	Name string
	// Host wrote the record: "" an older safe-ipam's, This this machine,
	// else another machine's name.
	Host string
	// Age is how long ago the record was written.
	Age   time.Duration
	State record.State
	// Listed: the listing lists its attachment.
	Listed bool
	// Shared: the store holds other machines' records too (etcd).
	Shared bool
	// Lags: the listing is a liveness source (not the runtime's GC list).
	Lags    bool
	Release bool
	// Forget is the verdict for repair's forgetting (a committed record
	// only), where it differs from Release.
	Forget *bool
}

// This stands for this machine's host name in Row.Host.
const This = "\x00this"

// Grace is the gcGracePeriod (and repair's --min-age) the rows assume.
const Grace = 5 * time.Minute

var no = false

// Rows are the record cases every listing path answers alike.
var Rows = []Row{
	{Name: "listed", Host: This, Age: time.Hour, State: record.Committed, Listed: true, Shared: true, Lags: true},
	{Name: "not listed, old", Host: This, Age: time.Hour, State: record.Committed, Shared: true, Lags: true, Release: true},
	{Name: "not listed, young, lagging source", Host: This, Age: time.Second, State: record.Committed, Shared: true, Lags: true},
	{Name: "not listed, young, the runtime's GC list", Host: This, Age: time.Second, State: record.Committed, Shared: true, Release: true},
	{Name: "another host's, shared store", Host: "other-machine", Age: time.Hour, State: record.Committed, Shared: true, Lags: true},
	{Name: "another host's name, file store (a rename)", Host: "other-machine", Age: time.Hour, State: record.Committed, Lags: true, Release: true},
	{Name: "no host (an older record)", Age: time.Hour, State: record.Committed, Shared: true, Lags: true, Release: true},
	{Name: "releasing, old, not listed", Host: This, Age: time.Hour, State: record.Releasing, Shared: true, Lags: true, Release: true, Forget: &no},
	{Name: "pending, young", Host: This, Age: time.Second, State: record.Pending, Shared: true, Release: false},
}

// For says whether the row applies to a path whose listing lags (or not)
// and whose store is shared (or not): a record older than Grace is judged
// alike by a listing that lags and one that does not, and one this
// machine wrote (or an older safe-ipam) alike in either store.
func (r Row) For(lags, shared bool) bool {
	return (r.Shared == shared || r.Host == This || r.Host == "") && (r.Lags == lags || r.Age > Grace)
}

// Record builds the row's record of attachment net1/cid/eth0 on node,
// written at now less Age, holding 10.244.0.<i+1>.
func (r Row) Record(node, cid string, i int, now time.Time) *record.Record {
	host := r.Host
	if host == This {
		host = record.ThisHost()
	}
	at := now.Add(-r.Age)
	return &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"}, Node: node, Host: host,
		Handle: "net1." + cid, State: r.State, IPs: []string{fmt.Sprintf("10.244.0.%d/26", i+1)}, Created: at, Updated: at}
}

// Want is the row's verdict for a path that forgets (repair) or releases.
func (r Row) Want(forget bool) bool {
	if forget && r.Forget != nil {
		return *r.Forget
	}
	return r.Release
}

// Listing is a listing of this machine's runtime for node, listing cid
// (and another attachment) when listed says so.
func Listing(node, cid string, listed, lags bool) *rulebook.Listing {
	return &rulebook.Listing{Source: "the rows' listing", Node: node, Host: record.ThisHost(), Entries: 1, Lags: lags,
		Attachment: func(c, ifname string) bool { return listed && c == cid && ifname == "eth0" || c == "other" }}
}

// DeathRow is a record of another node, with what Calico's Nodes and the
// sweeps say of that node: the evidence of the dead-node sweep (gc
// --dead-nodes) and of an ADD handed an address the record holds.
type DeathRow struct {
	Name string
	// Known: Calico's Nodes list the node.
	Known bool
	// Noted: a sweep found the node gone before, setting this grace;
	// negative for never.
	Noted time.Duration
	State record.State
	// Age is how long ago the record was written.
	Age     time.Duration
	Release bool
}

// DeathRows are the cases every path that judges by a node's death
// answers alike. An ADD meets committed holders only (a holder's index
// entry fences only while it is committed).
var DeathRows = []DeathRow{
	{Name: "known", Known: true, Noted: -1, State: record.Committed, Age: time.Hour},
	{Name: "gone, never found so", Noted: -1, State: record.Committed, Age: time.Hour},
	{Name: "gone, found so within the grace", Noted: time.Hour, State: record.Committed, Age: time.Hour},
	{Name: "gone, found so a grace ago", Noted: 0, State: record.Committed, Age: time.Hour, Release: true},
	{Name: "gone a grace ago, releasing", Noted: 0, State: record.Releasing, Age: time.Hour, Release: true},
	{Name: "gone a grace ago, pending, young", Noted: 0, State: record.Pending, Age: time.Second},
}

// Death is the row's evidence as the rulebook takes it (the store's
// clock says whether the grace passed).
func (r DeathRow) Death() *rulebook.Death {
	d := &rulebook.Death{Known: r.Known}
	if !r.Known && r.Noted >= 0 {
		d.Noted, d.Grace, d.Passed = true, r.Noted, r.Noted == 0
	}
	return d
}

// Record builds the row's record of attachment net1/cid/eth0 on node,
// written at now less Age, holding 10.244.0.<i+1>.
func (r DeathRow) Record(node, cid string, i int, now time.Time) *record.Record {
	return Row{Host: This, Age: r.Age, State: r.State}.Record(node, cid, i, now)
}
