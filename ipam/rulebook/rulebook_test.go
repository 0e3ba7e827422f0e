package rulebook_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook/rulebooktest"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

var now = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func never(*record.Owner) bool { return false }

// The shared rows, judged by the rulebook itself.
func TestRows(t *testing.T) {
	for _, row := range rulebooktest.Rows {
		for _, forget := range []bool{false, true} {
			rec := row.Record("node1", "c1", 0, now)
			w := rulebook.Witness{Node: "node1", Shared: row.Shared, Listing: rulebooktest.Listing("node1", "c1", row.Listed, row.Lags),
				Now: now, Grace: rulebooktest.Grace, Forget: forget, OwnerRuns: never}
			if v := w.Judge(rec); v.Release != row.Want(forget) {
				t.Errorf("%s (forget %v): %+v, want release %v", row.Name, forget, v, row.Want(forget))
			}
		}
	}
}

// Each rule of Record, in the order docs/design.md's table has them.
func TestRecordRules(t *testing.T) {
	old := now.Add(-time.Hour)
	rec := func(mod func(*record.Record)) *record.Record {
		r := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "c1", IfName: "eth0"}, Node: "node1", Host: "me",
			State: record.Committed, Created: old, Updated: old}
		if mod != nil {
			mod(r)
		}
		return r
	}
	runtime := func(mod func(*rulebook.Listing)) *rulebook.Listing {
		l := &rulebook.Listing{Source: "src", Node: "node1", Host: "me", Entries: 1, Lags: true,
			Attachment: func(cid, ifname string) bool { return cid == "live" && ifname == "eth0" }}
		if mod != nil {
			mod(l)
		}
		return l
	}
	gone := &rulebook.Death{Noted: true, Passed: true}
	tests := []struct {
		rule string
		w    rulebook.Witness
		rec  *record.Record
		want string // in Why; "" releases
	}{
		{"R1 no witness", rulebook.Witness{}, rec(nil), "no witness"},
		{"R2 damaged, death", rulebook.Witness{Death: gone}, rec(func(r *record.Record) { r.Node = "" }), "damaged"},
		{"R3 another node", rulebook.Witness{Listing: runtime(func(l *rulebook.Listing) { l.Node = "node2" })}, rec(nil), "speaks for node"},
		{"R3 a record without a node, listed among node1's", rulebook.Witness{Node: "node1", Listing: runtime(nil)}, rec(func(r *record.Record) { r.Node = "" }), ""},
		{"R4 pods", rulebook.Witness{Listing: runtime(func(l *rulebook.Listing) { l.Names = rulebook.Pods })}, rec(nil), "names pods"},
		{"R5 another host, shared", rulebook.Witness{Shared: true, Listing: runtime(nil)}, rec(func(r *record.Record) { r.Host = "them" }), "written by host them"},
		{"R5 another host's name, file store", rulebook.Witness{Listing: runtime(nil)}, rec(func(r *record.Record) { r.Host = "them" }), ""},
		{"R5 a listing bound to no machine", rulebook.Witness{Shared: true, Listing: runtime(func(l *rulebook.Listing) { l.Host = "" })}, rec(func(r *record.Record) { r.Host = "them" }), ""},
		{"R5 a former name: a record without a host", rulebook.Witness{Shared: true, Listing: runtime(func(l *rulebook.Listing) { l.Former = true })}, rec(func(r *record.Record) { r.Host = "" }), "written by host"},
		{"R5 a former name: this host's record", rulebook.Witness{Shared: true, Listing: runtime(func(l *rulebook.Listing) { l.Former = true })}, rec(nil), ""},
		{"R6 listed", rulebook.Witness{Listing: runtime(nil)}, rec(func(r *record.Record) { r.ContainerID = "live" }), "listed as running"},
		{"R6 a container listing lists every interface", rulebook.Witness{Listing: runtime(func(l *rulebook.Listing) {
			l.Names, l.Container = rulebook.Containers, func(cid string) bool { return cid == "live" }
		})}, rec(func(r *record.Record) { r.ContainerID, r.IfName = "live", "net1" }), "listed as running"},
		{"R7 pending, its ADD runs", rulebook.Witness{Listing: runtime(nil), OwnerRuns: func(*record.Owner) bool { return true }}, rec(func(r *record.Record) { r.State = record.Pending }), "still runs"},
		{"R8 pending, young", rulebook.Witness{Listing: runtime(nil), Now: now, Grace: time.Minute, OwnerRuns: never}, rec(func(r *record.Record) { r.State, r.Created = record.Pending, now }), "pending for less"},
		{"R8 pending, old", rulebook.Witness{Listing: runtime(nil), Now: now, Grace: time.Minute, OwnerRuns: never}, rec(func(r *record.Record) { r.State = record.Pending }), ""},
		{"R9 lagging, changed just now", rulebook.Witness{Listing: runtime(nil), Now: now, Grace: time.Minute}, rec(func(r *record.Record) { r.Updated = now }), "written less than"},
		{"R9 the runtime's own list does not lag", rulebook.Witness{Listing: runtime(func(l *rulebook.Listing) { l.Lags = false }), Now: now, Grace: time.Minute}, rec(func(r *record.Record) { r.Updated = now }), ""},
		{"R10 node known", rulebook.Witness{Death: &rulebook.Death{Known: true}}, rec(nil), "Calico knows"},
		{"R10 found gone once", rulebook.Witness{Death: &rulebook.Death{}}, rec(nil), "found so first now"},
		{"R10 within the grace", rulebook.Witness{Death: &rulebook.Death{Noted: true, Since: old, Grace: time.Hour}}, rec(nil), "or more after that"},
		{"R10 gone, another host's, shared", rulebook.Witness{Shared: true, Death: gone}, rec(func(r *record.Record) { r.Host = "them" }), ""},
		{"R11 forget a releasing record", rulebook.Witness{Listing: runtime(nil), Forget: true}, rec(func(r *record.Record) { r.State = record.Releasing }), "DEL or ADD at work"},
		{"R11 forget a committed record", rulebook.Witness{Listing: runtime(nil), Forget: true}, rec(nil), ""},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			if tt.w.OwnerRuns == nil {
				tt.w.OwnerRuns = never
			}
			if tt.w.Now.IsZero() {
				tt.w.Now = now
			}
			v := tt.w.Judge(tt.rec)
			if v.Release != (tt.want == "") || !strings.Contains(v.Why, tt.want) {
				t.Errorf("%+v; want %q", v, tt.want)
			}
		})
	}
}

func TestTrustListing(t *testing.T) {
	recs := []*record.Record{{Node: "node1", Host: "them"}}
	l := func(entries int, saysNone bool) *rulebook.Listing {
		return &rulebook.Listing{Source: "src", Node: "node1", Host: "me", Entries: entries, SaysNone: saysNone}
	}
	tests := []struct {
		name   string
		l      *rulebook.Listing
		node   string
		shared bool
		recs   []*record.Record
		want   string
	}{
		{"none", nil, "node1", true, nil, "no witness"},
		{"another node", l(1, false), "node2", true, nil, "speaks for node"},
		{"empty, records it would judge", l(0, false), "node1", false, recs, "lists nothing running while node node1 has 1"},
		{"empty, only another host's records (issue 41, item 2.9)", l(0, false), "node1", true, recs, ""},
		{"empty on purpose (GC's [])", l(0, true), "node1", false, recs, ""},
		{"empty, no records", l(0, false), "node1", false, nil, ""},
		{"lists something", l(1, false), "node1", false, recs, ""},
		{"pods", &rulebook.Listing{Source: "pods", Node: "node1", Names: rulebook.Pods, Entries: 1}, "node1", false, nil, "names pods"},
	}
	for _, tt := range tests {
		if got := rulebook.TrustListing(tt.l, tt.node, tt.shared, tt.recs); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// Issue 41, item 2.7: a Nodes listing that lacks the sweeping node, or
// too large a share of the nodes with records at once, is no evidence.
func TestTrustNodes(t *testing.T) {
	known := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	four := []string{"a", "b", "c", "d"}
	tests := []struct {
		name string
		n    rulebook.NodesListing
		want string
	}{
		{"all known", rulebook.NodesListing{Self: "a", Known: known(four...), Recorded: four}, ""},
		{"one of four gone", rulebook.NodesListing{Self: "a", Known: known("a", "b", "c"), Recorded: four}, ""},
		{"two of four gone: the share, not more", rulebook.NodesListing{Self: "a", Known: known("a", "b"), Recorded: four}, ""},
		{"three of four gone", rulebook.NodesListing{Self: "a", Known: known("a"), Recorded: four}, "lack 3 of the 4 nodes known"},
		{"an empty listing", rulebook.NodesListing{Self: "a", Known: known(), Recorded: four}, "lack this very node"},
		{"a listing without this node", rulebook.NodesListing{Self: "a", Known: known("b", "c", "d"), Recorded: four}, "lack this very node"},
		{"a share set higher", rulebook.NodesListing{Self: "a", Known: known("a"), Recorded: four, MaxGoneShare: 0.8}, ""},
		{"the only node with records gone, one known", rulebook.NodesListing{Self: "a", Known: known("a"), Recorded: []string{"b"}}, ""},
		{"nodes without records count", rulebook.NodesListing{Self: "a", Known: known("a", "x", "y"), Recorded: []string{"b", "c"}}, ""},
	}
	for _, tt := range tests {
		if got := rulebook.TrustNodes(tt.n); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// Each rule of Handle.
func TestHandleRules(t *testing.T) {
	addr := netip.MustParseAddr("10.244.0.1")
	node1 := &rulebook.Listing{Source: "src", Node: "node1", Entries: 1,
		Container: func(cid string) bool { return cid == "live" }, Pod: func(p string) bool { return p == "default.live" },
		Addr: func(a netip.Addr) bool { return a == netip.MustParseAddr("10.244.0.9") }}
	everyNode := *node1
	everyNode.Node = ""
	blind := *node1
	blind.PodNamesGap = "src cannot speak for pod names"
	at := func(node string, age time.Duration) []rulebook.Alloc {
		return []rulebook.Alloc{{Addr: addr, Node: node, Time: now.Add(-age)}}
	}
	tests := []struct {
		rule string
		c    rulebook.HandleCase
		want string // "release", "live", or in Unjudged
	}{
		{"H1 VM", rulebook.HandleCase{Generation: rulebook.VMKeyed, Listing: node1, Allocs: at("node1", time.Hour)}, "judged by its VM"},
		{"H2 unnamed", rulebook.HandleCase{Generation: rulebook.Unnamed, Listing: node1, Allocs: at("node1", time.Hour)}, "names no container"},
		{"no listing", rulebook.HandleCase{Owner: "c", Allocs: at("node1", time.Hour)}, "no liveness source"},
		{"H3 records of another node", rulebook.HandleCase{Owner: "c", RecordsOf: "node2", Listing: &everyNode, Allocs: at("node1", time.Hour)}, "not read here"},
		{"H3 records of one node, no owner node", rulebook.HandleCase{Owner: "c", RecordsOf: "node1", Listing: &everyNode, Allocs: at("", time.Hour)}, "not read here"},
		{"H4 no owner node, node-local listing (issue 41, item 2.2)", rulebook.HandleCase{Generation: rulebook.PodNameKeyed, Owner: "default.web-0", Listing: node1, Allocs: at("", time.Hour)}, "no owner node"},
		{"H4 no owner node, a listing for every node", rulebook.HandleCase{Generation: rulebook.PodNameKeyed, Owner: "default.web-0", Listing: &everyNode, Allocs: at("", time.Hour)}, "release"},
		{"H4 another node", rulebook.HandleCase{Owner: "c", Listing: node1, Allocs: at("node2", time.Hour)}, "no liveness source covers"},
		{"H5 pod names gap", rulebook.HandleCase{Generation: rulebook.PodNameKeyed, Owner: "default.web-0", Listing: &blind, Allocs: at("node1", time.Hour)}, "cannot speak for pod names"},
		{"H5 a container handle does not need pod names", rulebook.HandleCase{Owner: "c", Listing: &blind, Allocs: at("node1", time.Hour)}, "release"},
		{"H6 young", rulebook.HandleCase{Owner: "c", Listing: node1, MinAge: time.Minute, Now: now, Allocs: at("node1", time.Second)}, "its ADD may still be running"},
		{"H6 undated, not settled", rulebook.HandleCase{Owner: "c", Listing: node1, MinAge: time.Minute, Now: now, Allocs: []rulebook.Alloc{{Addr: addr, Node: "node1"}}}, "no timestamp"},
		{"H6 undated, settled", rulebook.HandleCase{Owner: "c", Listing: node1, MinAge: time.Minute, SettledFor: time.Minute, Now: now, Allocs: []rulebook.Alloc{{Addr: addr, Node: "node1"}}}, "release"},
		{"H7 owner listed", rulebook.HandleCase{Owner: "live", Listing: node1, Now: now, Allocs: at("node1", time.Hour)}, "live"},
		{"H7 pod listed", rulebook.HandleCase{Generation: rulebook.PodNameKeyed, Owner: "default.live", Listing: node1, Now: now, Allocs: at("node1", time.Hour)}, "live"},
		{"H7 address listed", rulebook.HandleCase{Owner: "c", Listing: node1, Now: now, Allocs: []rulebook.Alloc{{Addr: netip.MustParseAddr("10.244.0.9"), Node: "node1", Time: now.Add(-time.Hour)}}}, "live"},
		{"release", rulebook.HandleCase{Owner: "c", Listing: node1, Now: now, Allocs: at("node1", time.Hour)}, "release"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			if tt.c.Now.IsZero() {
				tt.c.Now = now
			}
			v := rulebook.Handle(tt.c)
			switch tt.want {
			case "release":
				if !v.Release || v.Live || v.Unjudged != "" {
					t.Errorf("%+v; want release", v)
				}
			case "live":
				if v.Release || !v.Live {
					t.Errorf("%+v; want live", v)
				}
			default:
				if v.Release || !strings.Contains(v.Unjudged, tt.want) {
					t.Errorf("%+v; want unjudged %q", v, tt.want)
				}
			}
		})
	}
}

func TestPodHandleOwner(t *testing.T) {
	rec := &record.Record{PodNamespace: "default", PodName: "web-0", Node: "node1"}
	tests := []struct {
		owner     map[string]string
		byRuntime bool
		want      string
	}{
		{nil, true, ""},
		{nil, false, "records no owner"},
		{map[string]string{"namespace": "default", "pod": "web-1", "node": "node1"}, true, "names its owner default/web-1"},
		{map[string]string{"namespace": "default", "pod": "web-0", "node": "node2"}, false, "on node \"node2\""},
		{map[string]string{"namespace": "default", "pod": "web-0", "node": "node1"}, false, ""},
	}
	for _, tt := range tests {
		if got := rulebook.PodHandleOwner(tt.owner, rec, tt.byRuntime); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%v (runtime %v): %q, want %q", tt.owner, tt.byRuntime, got, tt.want)
		}
	}
}

// Uninstall forgets this machine's records only: in a shared store, a
// record another host wrote under the node's Calico name (a stale
// nodename) is that machine's to release.
func TestUninstallForgets(t *testing.T) {
	const lifetime = 65 * time.Second
	tests := []struct {
		name, recHost, host   string
		state                 record.State
		age                   time.Duration
		shared, forgets, wait bool
	}{
		{"this host's, shared store", "me", "me", record.Committed, time.Second, true, true, false},
		{"another host's, shared store", "them", "me", record.Committed, time.Hour, true, false, false},
		{"another host's name, file store (a host rename)", "them", "me", record.Committed, time.Hour, false, true, false},
		{"no host (an older safe-ipam's)", "", "me", record.Committed, time.Hour, true, true, false},
		{"this host's name unknown", "them", "", record.Committed, time.Hour, true, true, false},
		{"this host before a rename (--former-host)", "before", "me", record.Committed, time.Hour, true, true, false},
		{"pending, its ADD may run", "me", "me", record.Pending, time.Second, false, false, true},
		{"releasing, its DEL may run", "me", "me", record.Releasing, lifetime - time.Second, true, false, true},
		{"pending longer than a call lives", "me", "me", record.Pending, lifetime, false, true, false},
		{"dated after now (the clock stepped back)", "me", "me", record.Pending, -time.Minute, false, true, false},
		{"another host's pending", "them", "me", record.Pending, time.Second, true, false, false},
	}
	u := rulebook.Uninstall{Hosts: []string{"me", "before"}, Now: now, CallLifetime: lifetime}
	for _, tt := range tests {
		rec := &record.Record{Host: tt.recHost, State: tt.state, Created: now.Add(-tt.age)}
		u.Hosts[0], u.Shared = tt.host, tt.shared
		if got := rulebook.UninstallForgets(rec, u); got.Release != tt.forgets || got.Wait != tt.wait {
			t.Errorf("%s: %+v, want forget %v, wait %v", tt.name, got, tt.forgets, tt.wait)
		}
	}
	// A long-lived pod's record its DEL marked releasing a moment ago:
	// judged by when it was last written, not created.
	marked := &record.Record{Host: "me", State: record.Releasing, Created: now.Add(-time.Hour), Updated: now.Add(-time.Second)}
	if got := rulebook.UninstallForgets(marked, u); !got.Wait {
		t.Errorf("a record marked releasing a second ago: %+v, want wait", got)
	}
}

// The death rows, as the rulebook answers them.
func TestDeathRows(t *testing.T) {
	for _, row := range rulebooktest.DeathRows {
		w := rulebook.Witness{Node: "node9", Shared: true, Death: row.Death(), Now: now, Grace: rulebooktest.Grace, OwnerRuns: never}
		if v := w.Judge(row.Record("node9", "c1", 0, now)); v.Release != row.Release {
			t.Errorf("%s: %+v, want release %v", row.Name, v, row.Release)
		}
	}
}

// A record's own handle is its container's alone; a pod-name or VM
// handle outlives it.
func TestOwnHandle(t *testing.T) {
	for handle, own := range map[string]bool{"net1.c1": true, "c1": true, "default.web-0": false, "net1.vmi.default.vm1": false, "net1.c2": false} {
		rec := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "c1", IfName: "eth0"}, Handle: handle}
		if got := rulebook.OwnHandle(rec); got != own {
			t.Errorf("%s: own %v, want %v", handle, got, own)
		}
	}
}

// The claim rules (C1 to C4 of docs/design.md), row by row.
func TestClaimRules(t *testing.T) {
	addr := netip.MustParseAddr("10.244.0.5")
	att := record.Attachment{Network: "net1", ContainerID: "c1", IfName: "eth0"}
	committed := &record.Record{Attachment: att, State: record.Committed, IPs: []string{"10.244.0.5/32"}}
	other := &record.Record{Attachment: att, State: record.Committed, IPs: []string{"10.244.0.6/32"}}
	running := &record.Record{Attachment: att, State: record.Pending, Owner: record.Self()}
	gone := &record.Record{Attachment: att, State: record.Pending, Owner: &record.Owner{PID: 1 << 30}}
	releasing := &record.Record{Attachment: att, State: record.Releasing, IPs: []string{"10.244.0.5/32"}}
	old := 2 * rulebook.ClaimGrace
	tests := []struct {
		name    string
		c       rulebook.ClaimCase
		release bool
	}{
		{"C1 another node's claim", rulebook.ClaimCase{Node: "node2", Host: "m2", Self: "node1", SelfHost: "m1", Addr: addr, Age: old}, false},
		{"C1 another machine's claim under this node's name", rulebook.ClaimCase{Node: "node1", Host: "m2", Self: "node1", SelfHost: "m1", Addr: addr, Age: old}, false},
		{"C2 the committed record holds it", rulebook.ClaimCase{Node: "node1", Host: "m1", Self: "node1", SelfHost: "m1", Addr: addr, Record: committed, Age: old}, false},
		{"C3 the ADD still runs", rulebook.ClaimCase{Node: "node1", Host: "m1", Self: "node1", SelfHost: "m1", Addr: addr, Record: running, Age: old}, false},
		{"C4 younger than the grace, no record", rulebook.ClaimCase{Node: "node1", Host: "m1", Self: "node1", SelfHost: "m1", Addr: addr, Age: rulebook.ClaimGrace / 2}, false},
		{"no record", rulebook.ClaimCase{Node: "node1", Host: "m1", Self: "node1", SelfHost: "m1", Addr: addr, Age: old}, true},
		{"a committed record of other addresses", rulebook.ClaimCase{Node: "node1", Host: "m1", Self: "node1", SelfHost: "m1", Addr: addr, Record: other, Age: old}, true},
		{"a pending record whose ADD is gone", rulebook.ClaimCase{Node: "node1", Host: "m1", Self: "node1", SelfHost: "m1", Addr: addr, Record: gone, Age: old}, true},
		{"a releasing record", rulebook.ClaimCase{Node: "node1", Host: "m1", Self: "node1", SelfHost: "m1", Addr: addr, Record: releasing, Age: old}, true},
	}
	for _, tt := range tests {
		if got := rulebook.Claim(tt.c); got.Release != tt.release || got.Why == "" {
			t.Errorf("%s: %+v, want release %v", tt.name, got, tt.release)
		}
	}
	now := time.Now()
	since := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	for _, tt := range []struct {
		name      string
		c         rulebook.RemoteQuarantineCase
		release   bool
		goneSince *time.Time // the note kept
	}{
		{"Q1 the holder's claim cannot be read", rulebook.RemoteQuarantineCase{Grace: rulebook.RemoteQuarantineGrace, ReadErr: errors.New("timeout"), GoneSince: since(time.Hour), Now: now}, false, since(time.Hour)},
		{"Q2 the holder's claim stands (the note goes)", rulebook.RemoteQuarantineCase{Grace: rulebook.RemoteQuarantineGrace, Standing: true, GoneSince: since(time.Hour), Now: now}, false, nil},
		{"Q3 gone, found so first now", rulebook.RemoteQuarantineCase{Grace: rulebook.RemoteQuarantineGrace, Now: now}, false, &now},
		{"Q4 gone for less than the grace", rulebook.RemoteQuarantineCase{Grace: rulebook.RemoteQuarantineGrace, GoneSince: since(rulebook.RemoteQuarantineGrace / 2), Now: now}, false, since(rulebook.RemoteQuarantineGrace / 2)},
		{"gone for the grace", rulebook.RemoteQuarantineCase{Grace: rulebook.RemoteQuarantineGrace, GoneSince: since(rulebook.RemoteQuarantineGrace), Now: now}, true, since(rulebook.RemoteQuarantineGrace)},
		{"no grace: still a round after the first", rulebook.RemoteQuarantineCase{Now: now}, false, &now},
		{"no grace, the round after", rulebook.RemoteQuarantineCase{GoneSince: since(0), Now: now}, true, since(0)},
	} {
		got := rulebook.RemoteQuarantine(tt.c)
		if got.Release != tt.release || got.Why == "" || (got.GoneSince == nil) != (tt.goneSince == nil) || got.GoneSince != nil && !got.GoneSince.Equal(*tt.goneSince) {
			t.Errorf("%s: %+v, want release %v, note %v", tt.name, got, tt.release, tt.goneSince)
		}
	}
}
