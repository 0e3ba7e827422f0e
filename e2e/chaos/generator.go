package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
)

// SetupFor derives a random history's setup from its seed, so that a seed
// alone replays it. The low bits cycle through generation, store and node
// count, so any eight consecutive seeds cover every combination.
func SetupFor(seed uint64) Setup {
	gens := []Generation{Legacy, Modern}
	stores := []StoreKind{FileStore, EtcdStore}
	s := Setup{Generation: gens[seed%2], Store: stores[seed/2%2], Nodes: 1 + int(seed/4%2), Pool: WidePool}
	rng := newRNG(seed, 1)
	if rng.IntN(3) == 0 {
		s.Pool = TightPool
	}
	s.HostLock = rng.IntN(2) == 0
	// Two nodes on one etcd prefix, as the default config has it: a dead
	// node's records are then in every node's way.
	s.SharedPrefix = s.Store == EtcdStore && s.Nodes == 2 && rng.IntN(2) == 0
	return s
}

// ControlSetup is the setup of the control: calico-ipam alone, Calico
// 2.x handles, the seed's other choices.
func ControlSetup(seed uint64) Setup {
	s := SetupFor(seed)
	s.Generation, s.Store = Legacy, NoSafeIPAM
	return s
}

func newRNG(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x5afe1fa3^stream))
}

// Generator makes a random StatefulSet-style history: pods recreated
// under the same name on one or two nodes, DELs late and repeated,
// concurrent ADD and DEL from several workers, crashes at armed crash
// points, etcd outages between and amid calls, GC with valid-attachment
// lists, and sandboxes the runtime forgets. It decides each step from the
// model, as a runtime reacts to what it saw.
type Generator struct {
	rng     *rand.Rand
	setup   Setup
	pods    []string
	length  int
	done    int
	workers int
	// Per-call and per-step probabilities.
	crashRate, outageRate, gcRate float64
	drainByGC                     bool
	// outside decides, from a stream of its own, when an outside actor
	// frees a live attachment's address: a seed's history is the same as
	// without the actor up to its first act.
	outside     *rand.Rand
	outsideRate float64
	// death decides, from a stream of its own, when a node dies and when
	// the DaemonSet's gc --dead-nodes runs after that; dead are the nodes
	// that died.
	death     *rand.Rand
	deathRate float64
	dead      map[string]bool
	// life decides, from a stream of its own, when safe-ipam is
	// uninstalled from a node and installed again, and when it is upgraded
	// over records without index entries.
	life        *rand.Rand
	uninstalled map[string]bool
	cycled      bool
}

// NewGenerator makes the generator of seed's history for setup.
func NewGenerator(seed uint64, setup Setup) *Generator {
	rng := newRNG(seed, 2)
	g := &Generator{rng: rng, setup: setup, length: 20 + rng.IntN(16), workers: 1 + rng.IntN(3)}
	for i := range 2 + rng.IntN(3) {
		g.pods = append(g.pods, fmt.Sprintf("web-%d", i))
	}
	g.outageRate = float64(rng.IntN(3)) * 0.04
	if setup.Safe() {
		// calico-ipam alone has no crash points and no GC.
		g.crashRate = 0.1 + 0.2*rng.Float64()
		g.gcRate = 0.1
		g.drainByGC = rng.IntN(3) == 0
		g.outside = newRNG(seed, 3)
		g.outsideRate = 0.05 * float64(g.outside.IntN(3))
		g.death = newRNG(seed, 4)
		if setup.Nodes == 2 && (setup.Store == FileStore || setup.SharedPrefix) {
			g.deathRate = 0.04
		}
	}
	g.dead, g.uninstalled = map[string]bool{}, map[string]bool{}
	if setup.Safe() {
		g.life = newRNG(seed, 5)
	}
	return g
}

// DrainByGC implements Schedule.
func (g *Generator) DrainByGC() bool { return g.drainByGC }

// Next implements Schedule.
func (g *Generator) Next(m *Model) (Step, bool) {
	if g.done >= g.length {
		return Step{}, false
	}
	if step, ok := g.outsideStep(m); ok {
		return step, true
	}
	if step, ok := g.deathStep(m); ok {
		return step, true
	}
	if step, ok := g.lifeStep(m); ok {
		return step, true
	}
	g.done++
	r := g.rng.Float64()
	switch {
	case r < g.outageRate:
		return g.outageStep(m), true
	case r < g.outageRate+g.gcRate:
		return g.gcStep(m), true
	}
	return g.batchStep(m), true
}

// batch collects the calls and notes of one step.
type batch struct {
	Step
	used  map[*Attachment]bool
	notes []string
	// outage: etcd is down for the whole step.
	outage bool
	// crashes: crash points may be armed.
	crashes bool
}

func newBatch(outage Outage, crashes bool) *batch {
	return &batch{Step: Step{Outage: outage}, used: map[*Attachment]bool{}, outage: outage == Between, crashes: crashes}
}

func (b *batch) step() Step {
	b.Note = strings.Join(b.notes, "; ")
	return b.Step
}

func (g *Generator) batchStep(m *Model) Step {
	b := newBatch(NoOutage, g.setup.Safe())
	for range 1 + g.rng.IntN(g.workers) {
		g.act(m, b, false)
	}
	return b.step()
}

// outageStep stops etcd: for the whole step (the calls must fail and
// change nothing), or at a random moment while the calls run, starting
// it again a random moment later.
func (g *Generator) outageStep(m *Model) Step {
	kind := Between
	if g.rng.IntN(2) == 0 {
		kind = Amid
	}
	b := newBatch(kind, false)
	if kind == Amid {
		b.PauseAfter = time.Duration(g.rng.IntN(40)) * time.Millisecond
		b.ResumeAfter = time.Duration(g.rng.IntN(1500)) * time.Millisecond
		b.notes = append(b.notes, fmt.Sprintf("etcd stops %s into the calls and restarts %s later", b.PauseAfter, b.ResumeAfter))
	} else {
		b.notes = append(b.notes, "etcd is down for the whole step")
	}
	for range 1 + g.rng.IntN(g.workers) {
		g.act(m, b, false)
	}
	if kind == Between && g.setup.Safe() && g.rng.IntN(3) == 0 {
		if node := g.node(); !g.uninstalled[node] {
			call := Call{Verb: GC, Node: node, Valid: m.Valid(node), Outage: true}
			b.add(call, g.outageExpect(call))
		}
	}
	return b.step()
}

// outsideStep: now and then, an actor behind safe-ipam's back frees a
// live attachment's address: a plain calico-ipam DEL of its container
// with pod identity from a node without safe-ipam, or a direct release in
// Calico's data. Fencing must keep the address from every other live
// attachment until the victim is released.
func (g *Generator) outsideStep(m *Model) (Step, bool) {
	if g.outside == nil || g.outside.Float64() >= g.outsideRate {
		return Step{}, false
	}
	var live []*Attachment
	for _, a := range m.Atts {
		if a.live() && !a.Victim && !a.Unrecorded && !m.Uninstalled(a.Node) {
			live = append(live, a)
		}
	}
	if len(live) == 0 {
		return Step{}, false
	}
	a := live[g.outside.IntN(len(live))]
	by := []string{OutsideCalicoDel, OutsideIPAMRelease}[g.outside.IntN(2)]
	return OutsideStep(a, by), true
}

// deathStep: now and then one of two nodes dies (once per history), and
// after that, now and then, the DaemonSet's gc --dead-nodes runs on the
// node that lives. Until it does, the ADD Calico hands a dead node's
// address to must settle the record itself, never fence on it.
func (g *Generator) deathStep(m *Model) (Step, bool) {
	if g.death == nil || g.deathRate == 0 {
		return Step{}, false
	}
	r := g.death.Float64()
	switch {
	case len(g.dead) == 0 && r < g.deathRate:
		node := Nodes[g.death.IntN(2)]
		g.dead[node] = true
		return NodeDeathStep(node), true
	case len(g.dead) > 0 && m.Setup.Store == EtcdStore && r < 0.15:
		return single(Call{Verb: DeadNodesGC, Node: g.node()}, Succeeds, "the DaemonSet's gc --dead-nodes runs"), true
	}
	return Step{}, false
}

// lifeStep: now and then safe-ipam is upgraded over records without
// index entries; and, with Calico 3.x handles (with 2.x, calico-ipam alone
// is the incident), uninstalled from a node while nothing is fenced, and
// installed there again a few steps later (once per history).
func (g *Generator) lifeStep(m *Model) (Step, bool) {
	if g.life == nil {
		return Step{}, false
	}
	r := g.life.Float64()
	for node, off := range g.uninstalled {
		if off && r < 0.2 {
			g.uninstalled[node] = false
			return LifeStep(Reinstall, node), true
		}
		if off {
			return Step{}, false
		}
	}
	switch {
	case r < 0.03:
		return LifeStep(Upgrade, ""), true
	case r < 0.06 && !g.cycled && g.setup.Generation == Modern:
		if node := g.node(); m.Calm(node) {
			g.uninstalled[node], g.cycled = true, true
			return LifeStep(Uninstall, node), true
		}
	}
	return Step{}, false
}

// LifeStep is an uninstall, re-install or upgrade of safe-ipam.
func LifeStep(v Verb, node string) Step {
	note := map[Verb]string{
		Uninstall:     "safe-ipam is uninstalled from " + node + ": its records are forgotten, calico-ipam runs alone there",
		UninstallRead: "uninstall on " + node + " reads its records, to forget them next",
		Reinstall:     "safe-ipam is installed on " + node + " again, and indexes its records",
		Upgrade:       "safe-ipam is upgraded over records an older version wrote without index entries; install indexes them",
	}[v]
	return single(Call{Verb: v, Node: node}, Succeeds, note)
}

// NodeDeathStep is node's death: kube-controllers frees what it held.
func NodeDeathStep(node string) Step {
	return single(Call{Verb: NodeDeath, Node: node}, Succeeds, fmt.Sprintf("node %s dies; kube-controllers frees its addresses and blocks and deletes its Calico Node", node))
}

// OutsideStep is an outside actor freeing a's address.
func OutsideStep(a *Attachment, by string) Step {
	return single(Call{Verb: Outside, Node: a.Node, Att: a, By: by}, Succeeds, fmt.Sprintf("an outside actor frees the address of %s (%s)", a, by))
}

// gcStep runs GC on one node, perhaps while ADDs run; every sandbox in
// flight is in the valid list, as the runtime knows it.
func (g *Generator) gcStep(m *Model) Step {
	b := newBatch(NoOutage, true)
	for range g.rng.IntN(g.workers) {
		g.act(m, b, true)
	}
	node := g.node()
	if g.uninstalled[node] {
		return b.step() // Calico's main plugin passes no GC to calico-ipam
	}
	call := g.arm(b, Call{Verb: GC, Node: node, Valid: m.Valid(node)})
	b.add(call, g.expect(b, call))
	return b.step()
}

// action is one thing the runtime may do next.
type action struct {
	weight int
	do     func()
}

// act adds one runtime action to the batch, chosen by weight among those
// the model allows. addsOnly restricts it to ADDs (beside a GC, a DEL of
// a sandbox the GC may collect would race it in ways the runtime avoids).
func (g *Generator) act(m *Model, b *batch, addsOnly bool) {
	var acts []action
	acts = append(acts, g.startPods(m, b)...)
	acts = append(acts, g.retryAdds(m, b)...)
	if !addsOnly {
		acts = append(acts, g.replacePods(m, b)...)
		acts = append(acts, g.owedDels(m, b)...)
		acts = append(acts, g.repeatDels(m, b)...)
		acts = append(acts, g.forgets(m, b)...)
	}
	total := 0
	for _, a := range acts {
		total += a.weight
	}
	if total == 0 {
		return
	}
	n := g.rng.IntN(total)
	for _, a := range acts {
		if n < a.weight {
			a.do()
			return
		}
		n -= a.weight
	}
}

// startPods: a pod with no running sandbox gets a new one.
func (g *Generator) startPods(m *Model, b *batch) []action {
	var acts []action
	for _, pod := range g.pods {
		if m.Current(pod) == nil {
			acts = append(acts, action{3, func() { g.addCall(b, m.Incarnate(pod, g.node(), g.containerID())) }})
		}
	}
	return acts
}

// retryAdds: the runtime retries a failed ADD of the running sandbox.
func (g *Generator) retryAdds(m *Model, b *batch) []action {
	var acts []action
	for _, pod := range g.pods {
		if a := m.Current(pod); a != nil && a.State == Failed && !b.used[a] {
			acts = append(acts, action{2, func() { g.addCall(b, a) }})
		}
	}
	return acts
}

// replacePods: a pod is deleted and recreated under the same name. The
// old sandbox's DEL comes now or later, and the new sandbox may start at
// once, racing it.
func (g *Generator) replacePods(m *Model, b *batch) []action {
	var acts []action
	for _, pod := range g.pods {
		a := m.Current(pod)
		if a == nil || b.used[a] {
			continue
		}
		acts = append(acts, action{2, func() {
			m.Retire(pod)
			b.notes = append(b.notes, fmt.Sprintf("%s is replaced", a))
			if g.rng.IntN(2) == 0 {
				g.delCall(b, a)
			}
			if g.rng.IntN(5) < 3 {
				g.addCall(b, m.Incarnate(pod, g.node(), g.containerID()))
			}
		}})
	}
	return acts
}

// owedDels: a DEL the runtime owes arrives, perhaps long after the pod's
// new sandbox started (kubernetes/kubernetes#44100).
func (g *Generator) owedDels(m *Model, b *batch) []action {
	var acts []action
	for _, a := range m.Atts {
		if a.owes() && !b.used[a] {
			acts = append(acts, action{3, func() { g.delCall(b, a) }})
		}
	}
	return acts
}

// repeatDels: a DEL arrives again for a sandbox already deleted, or for
// one the runtime forgot: DEL must succeed and release nobody else's.
func (g *Generator) repeatDels(m *Model, b *batch) []action {
	var acts []action
	for _, a := range m.Atts {
		if (a.State == Deleted || a.Forgotten) && !a.Gone && !b.used[a] {
			acts = append(acts, action{1, func() { g.delCall(b, a) }})
		}
	}
	return acts
}

// forgets: the runtime restarts and loses a sandbox whose ADD failed or
// whose DEL it owes; from then on only GC releases it.
func (g *Generator) forgets(m *Model, b *batch) []action {
	if !g.setup.Safe() {
		return nil // no GC to clean up after calico-ipam alone
	}
	var acts []action
	for _, a := range m.Atts {
		lost := a.State == Failed || a.State == Deleting || (a.Old && a.State != Deleted)
		if lost && !a.Forgotten && !a.Gone && !a.Unrecorded && !m.Uninstalled(a.Node) && !b.used[a] {
			acts = append(acts, action{1, func() {
				m.Forget(a)
				b.notes = append(b.notes, fmt.Sprintf("the runtime forgets %s", a))
			}})
		}
	}
	return acts
}

func (g *Generator) addCall(b *batch, a *Attachment) {
	b.used[a] = true
	call := g.arm(b, Call{Verb: Add, Node: a.Node, Att: a, Outage: b.outage})
	b.add(call, g.expect(b, call))
}

func (g *Generator) delCall(b *batch, a *Attachment) {
	b.used[a] = true
	call := g.arm(b, Call{Verb: Del, Node: a.Node, Att: a, Outage: b.outage})
	b.add(call, g.expect(b, call))
}

// arm may set a crash point of the call's verb (calico-ipam alone has
// none).
func (g *Generator) arm(b *batch, call Call) Call {
	if b.crashes && g.rng.Float64() < g.crashRate && !g.uninstalled[call.Node] {
		steps := StepsOf(call.Verb)
		if g.setup.Kube() {
			steps = append(steps, claimsStepsOf(call.Verb)...)
		}
		call.CrashAt = steps[g.rng.IntN(len(steps))]
	}
	return call
}

// expect: with etcd up and no crash armed, DEL and GC must succeed (ADD
// may find the pool exhausted); during an outage every call must fail.
func (g *Generator) expect(b *batch, call Call) Expect {
	switch {
	case g.uninstalled[call.Node] && b.outage:
		return AnyOutcome // calico-ipam's own failure
	case b.outage:
		return g.outageExpect(call)
	case call.CrashAt != "" || b.Outage == Amid || call.Verb == Add:
		return AnyOutcome
	}
	return Succeeds
}

// outageExpect: safe-ipam with its records in the unreachable etcd
// refuses with 11 before changing anything. With a file store the
// delegate's failure comes through instead, and a GC with nothing to
// collect needs no etcd at all. Nor does an ADD retried over the
// committed record a crash after the commit left: it is answered from
// the record on the node (seed 186559945 found this expectation missing).
// Nor does the DEL of a quarantined attachment, which releases nothing
// until its holder is released (docs/design.md, "Fencing"; seed 607448584).
func (g *Generator) outageExpect(call Call) Expect {
	return outageExpect(g.setup.Store, call)
}

func outageExpect(store StoreKind, call Call) Expect {
	switch {
	case store == EtcdStore:
		return TryAgain
	case call.Verb == GC:
		return AnyOutcome
	case call.Verb == Add && call.Att.Recorded:
		return Succeeds
	case call.Verb == Del && call.Att.Quarantined():
		return Succeeds
	}
	return Fails
}

// node picks a node that lives; with none dead it draws as it always did,
// so seeds replay their histories up to a death.
func (g *Generator) node() string {
	var alive []string
	for _, n := range Nodes[:max(1, g.setup.Nodes)] {
		if !g.dead[n] {
			alive = append(alive, n)
		}
	}
	return alive[g.rng.IntN(len(alive))]
}

// containerID is 64 hex digits, like a runtime's.
func (g *Generator) containerID() string {
	return fmt.Sprintf("%016x%016x%016x%016x", g.rng.Uint64(), g.rng.Uint64(), g.rng.Uint64(), g.rng.Uint64())
}

// StepsOf lists the crash points of a verb, in the order it reaches them.
func StepsOf(v Verb) []guard.Step {
	prefix := map[Verb]string{Add: "add-", Del: "del-", GC: "gc-"}[v]
	var out []guard.Step
	for _, s := range guard.Steps {
		if strings.HasPrefix(string(s), prefix) {
			out = append(out, s)
		}
	}
	return out
}
