package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
)

// Script is a fixed history: each entry builds its step from the model,
// since attachments come into being as the script runs.
type Script struct {
	Name  string
	Setup Setup
	steps []func(m *Model) Step
	byGC  bool
	next  int
	ids   int
}

// Next implements Schedule.
func (s *Script) Next(m *Model) (Step, bool) {
	if s.next >= len(s.steps) {
		return Step{}, false
	}
	s.next++
	return s.steps[s.next-1](m), true
}

// DrainByGC implements Schedule.
func (s *Script) DrainByGC() bool { return s.byGC }

func (s *Script) then(f func(m *Model) Step) *Script {
	s.steps = append(s.steps, f)
	return s
}

// containerID gives each sandbox of a script a readable, unique ID.
func (s *Script) containerID(pod string) string {
	s.ids++
	return fmt.Sprintf("%s-sandbox-%d", strings.ReplaceAll(pod, "-", ""), s.ids)
}

// start makes a new incarnation of pod on node and ADDs it.
func (s *Script) start(pod, node string, crashAt guard.Step, e Expect) *Script {
	return s.then(func(m *Model) Step {
		a := m.Incarnate(pod, node, s.containerID(pod))
		return single(Call{Verb: Add, Node: node, Att: a, CrashAt: crashAt}, e, "")
	})
}

// retryAdd ADDs pod's running sandbox again.
func (s *Script) retryAdd(pod string, crashAt guard.Step, e Expect) *Script {
	return s.then(func(m *Model) Step {
		a := m.Current(pod)
		return single(Call{Verb: Add, Node: a.Node, Att: a, CrashAt: crashAt}, e, "the runtime retries the ADD")
	})
}

// del DELs the n-th attachment the script made (0-based).
func (s *Script) del(n int, crashAt guard.Step, e Expect) *Script {
	return s.then(func(m *Model) Step {
		a := m.Atts[n]
		return single(Call{Verb: Del, Node: a.Node, Att: a, CrashAt: crashAt}, e, "")
	})
}

// forget makes the runtime lose the n-th attachment.
func (s *Script) forget(n int) *Script {
	return s.then(func(m *Model) Step {
		m.Forget(m.Atts[n])
		return Step{Note: fmt.Sprintf("the runtime forgets %s", m.Atts[n])}
	})
}

// gc runs GC on node with what the runtime still knows as valid.
func (s *Script) gc(node string, crashAt guard.Step, e Expect) *Script {
	return s.then(func(m *Model) Step {
		return single(Call{Verb: GC, Node: node, Valid: m.Valid(node), CrashAt: crashAt}, e, "")
	})
}

// outside makes an outside actor free the n-th attachment's address.
func (s *Script) outside(n int, by string) *Script {
	return s.then(func(m *Model) Step { return OutsideStep(m.Atts[n], by) })
}

func single(c Call, e Expect, note string) Step {
	return Step{Calls: []Call{c}, Expect: []Expect{e}, Note: note}
}

// Follow-ups: what the runtime does after a call crashed.
const (
	FollowRetry = "retry" // the same call again
	FollowDel   = "del"   // DEL of the attachment
	FollowGC    = "gc"    // the runtime forgets it; GC collects it
)

// FollowUps are the runtime's reactions the crash matrix tries.
var FollowUps = []string{FollowRetry, FollowDel, FollowGC}

// CrashScript is one cell of the crash matrix: safe-ipam is killed at
// step while a sandbox of web-0 is handled and another incarnation of
// web-0 is live (or becomes live) beside it, then the runtime reacts with
// followUp. The live neighbour is what a recovery that released by pod
// name would hit.
func CrashScript(step guard.Step, followUp string, gen Generation, store StoreKind) *Script {
	s := &Script{
		Name:  fmt.Sprintf("crash/%s/%s/%s-%s", step, followUp, gen, store),
		Setup: Setup{Generation: gen, Store: store, Nodes: 1, Pool: WidePool, HostLock: true},
	}
	switch {
	case step == guard.AddFailedReleased:
		return s.crashAddFailed(followUp)
	case strings.HasPrefix(string(step), "add-"):
		return s.crashAdd(step, followUp)
	case strings.HasPrefix(string(step), "del-"):
		return s.crashDel(step, followUp)
	}
	return s.crashGC(step, followUp)
}

const node1 = "node1"

// crashAdd: web-0's old sandbox (0) is live, its DEL late; the new
// sandbox (1) crashes in ADD.
func (s *Script) crashAdd(step guard.Step, followUp string) *Script {
	s.start("web-0", node1, "", Succeeds)
	if step == guard.AddRecovered {
		// Only an ADD over an unfinished record recovers: make one.
		s.start("web-0", node1, guard.AddDelegated, Crashes)
		s.retryAdd("web-0", step, Crashes)
	} else {
		s.start("web-0", node1, step, Crashes)
	}
	switch followUp {
	case FollowRetry:
		s.retryAdd("web-0", "", Succeeds)
	case FollowDel:
		s.del(1, "", Succeeds)
	case FollowGC:
		s.forget(1).gc(node1, "", Succeeds)
	}
	return s.del(0, "", Succeeds) // the old sandbox's late DEL
}

// crashAddFailed: the pool is full, so the delegate's ADD fails and
// safe-ipam is killed after releasing it.
func (s *Script) crashAddFailed(followUp string) *Script {
	s.Setup.Pool = SinglePool
	s.start("web-0", node1, "", Succeeds)
	for _, pod := range []string{"web-1", "web-2", "web-3"} {
		s.start(pod, node1, "", Succeeds)
	}
	s.start("web-0", node1, guard.AddFailedReleased, Crashes) // sandbox 4
	switch followUp {
	case FollowRetry:
		// The late DEL of web-0's old sandbox makes room.
		s.del(0, "", Succeeds).retryAdd("web-0", "", Succeeds)
	case FollowDel:
		s.del(4, "", Succeeds).del(0, "", Succeeds)
	case FollowGC:
		s.forget(4).gc(node1, "", Succeeds).del(0, "", Succeeds)
	}
	return s
}

// crashDel: web-0's new sandbox (1) is live; the old one's (0) late DEL
// crashes.
func (s *Script) crashDel(step guard.Step, followUp string) *Script {
	s.start("web-0", node1, "", Succeeds)
	s.start("web-0", node1, "", Succeeds)
	s.del(0, step, Crashes)
	switch followUp {
	case FollowRetry:
		s.del(0, "", Succeeds)
	case FollowDel:
		// web-0 is replaced again before the retried DEL arrives.
		s.start("web-0", node1, "", Succeeds).del(0, "", Succeeds)
	case FollowGC:
		s.forget(0).gc(node1, "", Succeeds)
	}
	return s
}

// crashGC: the runtime lost web-0's old sandbox (0); GC crashes
// collecting it while the new one (1) is live.
func (s *Script) crashGC(step guard.Step, followUp string) *Script {
	s.start("web-0", node1, "", Succeeds)
	s.start("web-0", node1, "", Succeeds)
	s.forget(0)
	s.gc(node1, step, Crashes)
	switch followUp {
	case FollowRetry:
		s.gc(node1, "", Succeeds)
	case FollowDel:
		s.del(0, "", Succeeds) // a stray late DEL after all
	case FollowGC:
		// A new pod starts before the next GC, which must keep it.
		s.start("web-1", node1, "", Succeeds).gc(node1, "", Succeeds)
	}
	return s
}

// CrashMatrix is every crash point with every follow-up, for each
// generation and store given.
func CrashMatrix(gens []Generation, stores []StoreKind) []func() *Script {
	return crashMatrix(guard.Steps, gens, stores)
}

func crashMatrix(steps []guard.Step, gens []Generation, stores []StoreKind) []func() *Script {
	var out []func() *Script
	for _, step := range steps {
		for _, f := range FollowUps {
			for _, g := range gens {
				for _, st := range stores {
					out = append(out, func() *Script { return CrashScript(step, f, g, st) })
				}
			}
		}
	}
	return out
}

// OutageScript: etcd, holding both safe-ipam's etcd records and Calico's
// data, stops while the runtime ADDs, DELs and GCs; everything must fail
// and change nothing, then succeed on retry once etcd is back.
func OutageScript(gen Generation, store StoreKind) *Script {
	s := &Script{
		Name:  fmt.Sprintf("outage/between/%s-%s", gen, store),
		Setup: Setup{Generation: gen, Store: store, Nodes: 1, Pool: WidePool, HostLock: true},
	}
	s.start("web-0", node1, "", Succeeds).start("web-0", node1, "", Succeeds)
	addExpect, delExpect, gcExpect := Fails, Fails, AnyOutcome
	if store == EtcdStore {
		addExpect, delExpect, gcExpect = TryAgain, TryAgain, TryAgain
	}
	if !s.Setup.Safe() {
		gcExpect = Fails
	}
	s.then(func(m *Model) Step {
		step := Step{Outage: Between, Note: "etcd is down for the whole step"}
		fresh := m.Incarnate("web-1", node1, s.containerID("web-1"))
		step.add(Call{Verb: Add, Node: node1, Att: fresh, Outage: true}, addExpect)
		step.add(Call{Verb: Del, Node: node1, Att: m.Atts[0], Outage: true}, delExpect)
		if s.Setup.Safe() {
			step.add(Call{Verb: GC, Node: node1, Valid: m.Valid(node1), Outage: true}, gcExpect)
		}
		return step
	})
	s.del(0, "", Succeeds)
	s.retryAdd("web-1", "", Succeeds)
	return s.del(0, "", Succeeds) // repeated: must not release anything of web-0's new sandbox
}

// AmidOutageScript: etcd stops while three workers ADD and DEL, and
// restarts while they may still be running; the runtime then retries
// what failed.
func AmidOutageScript(gen Generation, store StoreKind, pauseAfter, resumeAfter time.Duration) *Script {
	s := &Script{
		Name:  fmt.Sprintf("outage/amid-%s-%s/%s-%s", pauseAfter, resumeAfter, gen, store),
		Setup: Setup{Generation: gen, Store: store, Nodes: 2, Pool: WidePool},
	}
	s.start("web-0", node1, "", Succeeds).start("web-1", "node2", "", Succeeds)
	s.then(func(m *Model) Step {
		step := Step{Outage: Amid, PauseAfter: pauseAfter, ResumeAfter: resumeAfter, Note: "etcd stops amid the calls"}
		m.Retire("web-0")
		step.add(Call{Verb: Del, Node: node1, Att: m.Atts[0]}, AnyOutcome)
		for _, pod := range []string{"web-0", "web-2"} {
			a := m.Incarnate(pod, "node2", s.containerID(pod))
			step.add(Call{Verb: Add, Node: a.Node, Att: a}, AnyOutcome)
		}
		return step
	})
	s.then(func(m *Model) Step {
		step := Step{Note: "the runtime retries what failed"}
		for _, a := range m.Atts {
			switch {
			case a.State == Failed:
				step.add(Call{Verb: Add, Node: a.Node, Att: a}, Succeeds)
			case a.owes():
				step.add(Call{Verb: Del, Node: a.Node, Att: a}, Succeeds)
			}
		}
		return step
	})
	return s
}

// CrossNodeGCScript is a regression test for a bug this suite found: with
// one etcd prefix for every node (the default when the store is Calico's
// etcd), a GC on node1 listed node2's records too, and node2's live
// attachment is not in node1's valid list, so node1's GC released it.
func CrossNodeGCScript() *Script {
	s := &Script{
		Name:  "regression/gc-across-nodes",
		Setup: Setup{Generation: Modern, Store: EtcdStore, Nodes: 2, Pool: WidePool, SharedPrefix: true},
	}
	return s.start("web-0", node1, "", Succeeds).start("web-1", "node2", "", Succeeds).gc(node1, "", Succeeds)
}

// InvalidUTF8IfNameScript is a regression test for a bug this suite
// found: an ifname with a byte that is not UTF-8 passes CNI's checks, but
// the record stores it in JSON, which replaces the byte, so List returned
// a record under another name and GC leaked it. safe-ipam now refuses
// such a name before anything is allocated.
func InvalidUTF8IfNameScript(store StoreKind) *Script {
	s := &Script{
		Name:  "regression/ifname-not-utf8/" + string(store),
		Setup: Setup{Generation: Modern, Store: store, Nodes: 1, Pool: WidePool},
	}
	return s.then(func(m *Model) Step {
		a := m.Incarnate("web-0", node1, s.containerID("web-0"))
		a.IfName = "eth\xff"
		return single(Call{Verb: Add, Node: node1, Att: a}, Fails, "ifname \"eth\\xff\" is refused")
	}).forget(0).gc(node1, "", Succeeds)
}

// AmbiguousCommitScript is a regression test for a bug this suite found.
// An ADD's commit reaches etcd but its answer is lost (a one-way
// partition, or a timeout while etcd is slow): safe-ipam took the commit
// as failed and released the addresses in calico-ipam, though the record
// was committed, so the runtime's retried ADD replayed addresses Calico
// had freed, and the next pod got one of them (in a block of four,
// web-1's .1 went to web-4). Now an ADD whose commit outcome is unknown
// keeps the addresses under the record.
func AmbiguousCommitScript(gen Generation) *Script {
	s := &Script{
		Name:  "regression/ambiguous-commit/" + string(gen),
		Setup: Setup{Generation: gen, Store: EtcdStore, Nodes: 1, Pool: TightPool, StoreBehindProxy: true},
	}
	s.start("web-0", node1, "", Succeeds)
	s.then(func(m *Model) Step {
		a := m.Incarnate("web-1", node1, s.containerID("web-1"))
		return Step{Calls: []Call{{Verb: Add, Node: node1, Att: a, Hold: true}}, Expect: []Expect{AnyOutcome},
			Outage: Partition, Note: "the store's answers are lost from the delegate ADD on"}
	})
	s.retryAdd("web-1", "", Succeeds)
	for _, pod := range []string{"web-2", "web-3", "web-4"} {
		s.start(pod, node1, "", Succeeds)
	}
	return s
}

// RecordedRetryInOutageScript is the regression case of seed 186559945
// (modern/file-store/1-node), where the harness, not safe-ipam, was
// wrong. An ADD crashes right after its commit, and the runtime retries
// it while etcd is down. safe-ipam answers an ADD over a committed record
// from the record, as documented, and the invariants held, but the model
// expected every file-store call during an outage to fail. The record
// lives on the node, so the retry must succeed and change nothing; with
// the etcd store it cannot be read and the retry must give 11 (the
// model's outageExpect says so). A new pod afterwards must not get the
// replayed address.
func RecordedRetryInOutageScript(store StoreKind) *Script {
	s := &Script{
		Name:  "regression/recorded-retry-in-outage/" + string(store),
		Setup: Setup{Generation: Modern, Store: store, Nodes: 1, Pool: TightPool, HostLock: true},
	}
	s.start("web-0", node1, "", Succeeds)
	s.start("web-1", node1, guard.AddCommitted, Crashes)
	s.then(func(m *Model) Step {
		call := Call{Verb: Add, Node: node1, Att: m.Current("web-1"), Outage: true}
		return Step{Calls: []Call{call}, Expect: []Expect{outageExpect(store, call)},
			Outage: Between, Note: "etcd is down for the whole step; the runtime retries the ADD"}
	})
	s.retryAdd("web-1", "", Succeeds)
	return s.start("web-2", node1, "", Succeeds)
}

// OutsideReleaseScript: web-0 runs alone in a block of four when an
// outside actor frees its address. Three pods take the rest of the block;
// Calico then hands web-0's address to web-4, whose ADD fencing must fail
// with 11, keeping the address allocated; a retry gets 11 again while
// web-0 runs. Once web-0 is deleted, which releases the quarantine too,
// web-4's retried ADD succeeds. Without fencing, web-4 runs with web-0's
// address: a duplicate.
func OutsideReleaseScript(gen Generation, store StoreKind, by string) *Script {
	return outsideRelease(gen, store, by, false)
}

// UpgradeScript is OutsideReleaseScript over a record written without its
// index entry (an older safe-ipam), indexed by the upgrade's install
// before the outside release: fencing must cover it.
func UpgradeScript(store StoreKind) *Script {
	return outsideRelease(Modern, store, OutsideIPAMRelease, true)
}

func outsideRelease(gen Generation, store StoreKind, by string, upgrade bool) *Script {
	s := &Script{
		Name:  fmt.Sprintf("outside/%s/%s-%s", by, gen, store),
		Setup: Setup{Generation: gen, Store: store, Nodes: 1, Pool: SinglePool, HostLock: true},
	}
	s.start("web-0", node1, "", Succeeds)
	if upgrade {
		s.Name = fmt.Sprintf("upgrade/%s", store)
		s.then(func(*Model) Step { return LifeStep(Upgrade, "") })
	}
	s.outside(0, by)
	for _, pod := range []string{"web-1", "web-2", "web-3"} {
		s.start(pod, node1, "", Succeeds)
	}
	s.start("web-4", node1, "", TryAgain).retryAdd("web-4", "", TryAgain)
	s.then(func(m *Model) Step {
		m.Retire("web-0")
		return single(Call{Verb: Del, Node: node1, Att: m.Atts[0]}, Succeeds, "web-0 is deleted")
	})
	return s.retryAdd("web-4", "", Succeeds)
}

// OutsideScripts are the outside actor's scripts: a plain calico-ipam DEL
// frees an address only where Calico keys it by container (3.x), a direct
// release anywhere.
func OutsideScripts() []func() *Script {
	return []func() *Script{
		func() *Script { return OutsideReleaseScript(Modern, FileStore, OutsideCalicoDel) },
		func() *Script { return OutsideReleaseScript(Modern, EtcdStore, OutsideCalicoDel) },
		func() *Script { return OutsideReleaseScript(Legacy, FileStore, OutsideIPAMRelease) },
		func() *Script { return OutsideReleaseScript(Legacy, EtcdStore, OutsideIPAMRelease) },
	}
}

// Settling a dead node's records: by the ADD that meets one, or first by
// the DaemonSet's gc --dead-nodes.
const (
	SettleByAdd = "by-add"
	SettleByGC  = "by-gc"
)

// NodeDeathScript: web-0 runs on node1 with address X; node1 dies, and
// kube-controllers frees X and node1's block; node2, with no block yet,
// claims that block and is handed X for web-1. With the etcd store
// node1's record still holds X: once a sweep of gc --dead-nodes found
// node1 gone (the rulebook's two sightings: this one and the ADD's own
// read), the ADD must settle it, or gc --dead-nodes did first, never
// fence on it (invariant 4). With a file store node1's records died with
// it.
func NodeDeathScript(store StoreKind, settle string) *Script {
	s := &Script{
		Name:  fmt.Sprintf("node-death/%s/%s", store, settle),
		Setup: Setup{Generation: Modern, Store: store, Nodes: 2, Pool: WidePool, HostLock: true, SharedPrefix: store == EtcdStore},
	}
	s.start("web-0", node1, "", Succeeds)
	s.then(func(*Model) Step { return NodeDeathStep(node1) })
	switch {
	case settle == SettleByGC:
		s.then(func(*Model) Step {
			return single(Call{Verb: DeadNodesGC, Node: "node2"}, Succeeds, "the DaemonSet's gc --dead-nodes runs on node2")
		})
	case store == EtcdStore:
		s.then(func(*Model) Step {
			return single(Call{Verb: DeadNodesSighting, Node: "node2"}, Succeeds, "one sweep of the DaemonSet's gc --dead-nodes on node2 finds node1 gone")
		})
	}
	return s.start("web-1", "node2", "", Succeeds).start("web-2", "node2", "", Succeeds)
}

// FoundGoneOnceScript (issue 41, item 2.8): as NodeDeathScript, but no
// sweep has found node1 gone yet when node2's ADD is handed X. One
// reading that Calico lacks node1's Node is no proof (a node missing from
// one listing: re-registering, a restored backup): the ADD is fenced
// (11), as the sweep would keep the record, and its allocation is
// quarantined with node1's record. The DaemonSet's gc --dead-nodes then
// finds node1 gone twice and releases the record with the quarantine, and
// web-1 starts in a new sandbox (invariants 2 and 4).
func FoundGoneOnceScript() *Script {
	s := deadHolderScript("node-death/found-gone-once")
	s.start("web-1", "node2", "", TryAgain)
	s.then(func(*Model) Step {
		return single(Call{Verb: DeadNodesGC, Node: "node2"}, Succeeds, "the DaemonSet's gc --dead-nodes runs on node2")
	})
	return s.start("web-1", "node2", "", Succeeds).start("web-2", "node2", "", Succeeds)
}

// FencedByTheDeadScript: as FoundGoneOnceScript, but the runtime deletes
// the fenced web-1 before any sweep: its allocation stays quarantined
// with node1's record (its DEL releases nothing while the holder is
// kept), and goes when the DaemonSet's gc --dead-nodes releases the
// record. Nothing is lost or blocked at the end (invariants 2 and 4).
func FencedByTheDeadScript() *Script {
	s := deadHolderScript("node-death/fenced-then-deleted")
	s.start("web-1", "node2", "", TryAgain)
	s.then(func(m *Model) Step {
		a := m.Retire("web-1")
		return single(Call{Verb: Del, Node: "node2", Att: a}, Succeeds, "web-1 is deleted before any sweep")
	})
	s.then(func(*Model) Step {
		return single(Call{Verb: DeadNodesGC, Node: "node2"}, Succeeds, "the DaemonSet's gc --dead-nodes runs on node2")
	})
	return s.start("web-2", "node2", "", Succeeds)
}

// deadHolderScript opens a history in which web-0 runs on node1 (etcd
// store, shared by both nodes) and node1 dies: its record holds an
// address kube-controllers freed, which node2 is handed next.
func deadHolderScript(name string) *Script {
	s := &Script{
		Name:  name,
		Setup: Setup{Generation: Modern, Store: EtcdStore, Nodes: 2, Pool: WidePool, HostLock: true, SharedPrefix: true},
	}
	s.start("web-0", node1, "", Succeeds)
	return s.then(func(*Model) Step { return NodeDeathStep(node1) })
}

// NodesLostScript (issue 41, item 2.7): web-0 runs on node1, web-1 on
// node2 (etcd store), when Calico's Nodes vanish from the listing (a
// wrong prefix, a restored backup) while both nodes run. The DaemonSet's
// gc --dead-nodes on node2 must release nothing and fail, however often it
// sweeps: releasing node1's records would free web-0's address while it
// runs (invariant 1). The Nodes come back, and the pods go on.
func NodesLostScript() *Script {
	s := &Script{
		Name:  "node-death/nodes-listing-lost",
		Setup: Setup{Generation: Modern, Store: EtcdStore, Nodes: 2, Pool: WidePool, HostLock: true, SharedPrefix: true},
	}
	s.start("web-0", node1, "", Succeeds).start("web-1", "node2", "", Succeeds)
	s.then(func(*Model) Step {
		return single(Call{Verb: NodesLost}, Succeeds, "Calico's Nodes vanish from the listing while every node runs")
	})
	for range 2 {
		s.then(func(*Model) Step {
			return single(Call{Verb: DeadNodesGC, Node: "node2"}, Fails, "the DaemonSet's gc --dead-nodes on node2 must not trust the empty listing")
		})
	}
	s.then(func(*Model) Step { return single(Call{Verb: NodesBack}, Succeeds, "Calico's Nodes are back") })
	return s.start("web-2", node1, "", Succeeds)
}

// ComebackScript (issue 31, item 1): web-0, a Calico 2.x pod started
// while safe-ipam was away from node1, is adopted there under its pod
// name's handle with address X (etcd store). node1 dies and
// kube-controllers frees X; web-0 comes back under its name on node2,
// where calico-ipam keys by pod name, and is handed X again under the
// same handle. The DaemonSet's gc --dead-nodes then releases node1's
// record: releasing its pod-name handle would free the new web-0's X
// (invariant 1). The dead node's record is forgotten, never fenced on
// (invariant 4).
func ComebackScript() *Script {
	s := &Script{
		Name:  "node-death/comeback-under-pod-name",
		Setup: Setup{Generation: Legacy, Store: EtcdStore, Nodes: 2, Pool: WidePool, HostLock: true, SharedPrefix: true},
	}
	for _, node := range []string{node1, "node2"} {
		s.then(func(*Model) Step { return LifeStep(Uninstall, node) })
	}
	s.start("web-0", node1, "", Succeeds)
	s.then(func(*Model) Step { return LifeStep(Reinstall, node1) })
	s.then(func(m *Model) Step {
		return single(Call{Verb: Adopt, Node: node1, Att: m.Current("web-0")}, Succeeds, "safe-ipam adopt records web-0 under its pod name's handle")
	})
	s.then(func(*Model) Step { return NodeDeathStep(node1) })
	s.start("web-0", "node2", "", Succeeds)
	return s.then(func(*Model) Step {
		return single(Call{Verb: DeadNodesGC, Node: "node2"}, Succeeds, "the DaemonSet's gc --dead-nodes runs on node2")
	})
}

// UninstallScript: safe-ipam is uninstalled from node1 while web-0 and
// web-1 run; web-0 is deleted through calico-ipam alone and web-2 starts
// there without a record; safe-ipam is installed again and web-3 starts.
// Nothing safe-ipam kept may fence or leak (invariants 2 and 4).
func UninstallScript(store StoreKind) *Script {
	s := &Script{
		Name:  fmt.Sprintf("uninstall/%s", store),
		Setup: Setup{Generation: Modern, Store: store, Nodes: 1, Pool: SinglePool, HostLock: true},
	}
	s.start("web-0", node1, "", Succeeds).start("web-1", node1, "", Succeeds)
	s.then(func(*Model) Step { return LifeStep(Uninstall, node1) })
	s.then(func(m *Model) Step {
		a := m.Retire("web-0")
		return single(Call{Verb: Del, Node: node1, Att: a}, Succeeds, "web-0 is deleted, through calico-ipam alone")
	})
	s.start("web-2", node1, "", Succeeds)
	s.then(func(*Model) Step { return LifeStep(Reinstall, node1) })
	return s.start("web-3", node1, "", Succeeds)
}

// QuarantineRacesForgetScript (issue 31, item 5): uninstall on node1 has
// read its records when an ADD still in flight through safe-ipam is
// handed web-0's address (freed behind its back; web-0's pod is being
// deleted, its DEL failed) and fenced: the allocation is quarantined with
// web-0's record. Uninstall's forget of the record as it read it must not
// drop the quarantine's holder side and keep its mark: once safe-ipam is
// installed again, web-4's DEL would answer from the mark and never
// release the address. The forget conflicts; uninstall, run again,
// re-claims the quarantined address for web-0 (its record is committed:
// taken to run), which the retried DEL of web-0 then frees.
func QuarantineRacesForgetScript(store StoreKind) *Script {
	s := &Script{
		Name:  fmt.Sprintf("uninstall/quarantine-races-forget/%s", store),
		Setup: Setup{Generation: Modern, Store: store, Nodes: 1, Pool: SinglePool, HostLock: true},
	}
	s.start("web-0", node1, "", Succeeds).outside(0, OutsideIPAMRelease)
	for _, pod := range []string{"web-1", "web-2", "web-3"} {
		s.start(pod, node1, "", Succeeds)
	}
	s.del(0, guard.DelStart, Crashes)
	s.then(func(*Model) Step { return LifeStep(UninstallRead, node1) })
	s.start("web-4", node1, "", TryAgain)
	s.then(func(*Model) Step { return LifeStep(Uninstall, node1) })
	return s.then(func(*Model) Step { return LifeStep(Reinstall, node1) })
}

// UninstallQuarantineScript (issue 31, items 2 and 4): web-0's address
// is freed behind its back and handed to web-4, whose ADD is fenced: the
// allocation is quarantined with web-0's record, and web-0 runs. Uninstall
// must not free the address web-0 uses (invariant 3): it re-claims it
// for web-0 in Calico. interrupted: the first uninstall runs while etcd is
// down, restores Calico's files and cannot forget every record; the next
// finishes from what it left. web-5 then starts through calico-ipam
// alone and finds the pool full (web-0's address is web-0's), and
// safe-ipam is installed again.
func UninstallQuarantineScript(store StoreKind, interrupted bool) *Script {
	name := "uninstall/quarantine-held/%s"
	if interrupted {
		name = "uninstall/interrupted/%s"
	}
	s := &Script{
		Name:  fmt.Sprintf(name, store),
		Setup: Setup{Generation: Modern, Store: store, Nodes: 1, Pool: SinglePool, HostLock: true},
	}
	s.start("web-0", node1, "", Succeeds).outside(0, OutsideIPAMRelease)
	for _, pod := range []string{"web-1", "web-2", "web-3"} {
		s.start(pod, node1, "", Succeeds)
	}
	s.start("web-4", node1, "", TryAgain)
	if interrupted {
		s.then(func(*Model) Step {
			step := Step{Outage: Between, Note: "uninstall on node1 while etcd is down: Calico's files are back, the records cannot all be forgotten"}
			step.add(Call{Verb: Uninstall, Node: node1, Outage: true}, Fails)
			return step
		})
	}
	s.then(func(*Model) Step { return LifeStep(Uninstall, node1) })
	s.start("web-5", node1, "", Fails)
	return s.then(func(*Model) Step { return LifeStep(Reinstall, node1) })
}

// LifecycleScripts are the scripts of a cluster's life beyond its pods:
// node death, uninstall and re-install, an upgrade over index-less
// records.
func LifecycleScripts() []func() *Script {
	return []func() *Script{
		func() *Script { return UninstallScript(FileStore) },
		func() *Script { return UninstallScript(EtcdStore) },
		func() *Script { return QuarantineRacesForgetScript(FileStore) },
		func() *Script { return QuarantineRacesForgetScript(EtcdStore) },
		func() *Script { return UninstallQuarantineScript(FileStore, false) },
		func() *Script { return UninstallQuarantineScript(EtcdStore, false) },
		func() *Script { return UninstallQuarantineScript(FileStore, true) },
		func() *Script { return UninstallQuarantineScript(EtcdStore, true) },
		func() *Script { return UpgradeScript(FileStore) },
		func() *Script { return UpgradeScript(EtcdStore) },
		func() *Script { return NodeDeathScript(EtcdStore, SettleByAdd) },
		func() *Script { return NodeDeathScript(EtcdStore, SettleByGC) },
		func() *Script { return NodeDeathScript(FileStore, SettleByAdd) },
		FoundGoneOnceScript,
		FencedByTheDeadScript,
		NodesLostScript,
		ComebackScript,
	}
}
