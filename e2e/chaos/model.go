package chaos

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"

	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
)

// State is what the runtime believes about an attachment. It changes only
// on what the runtime saw, never on what the plugin did.
type State int

// Attachment states.
const (
	// Created: the sandbox exists, its ADD has not run yet.
	Created State = iota
	// Live: the last ADD succeeded; the pod uses IPs.
	Live
	// Failed: the last ADD failed or crashed; the plugin may hold
	// anything for it, until DEL or GC.
	Failed
	// Deleting: a DEL failed or crashed; the runtime owes another.
	Deleting
	// Deleted: a DEL succeeded, or a GC that did not list it did.
	Deleted
)

func (s State) String() string {
	return [...]string{"created", "live", "failed", "deleting", "deleted"}[s]
}

// Attachment is one sandbox of one pod incarnation on one node, the unit
// CNI names by (network, container ID, ifname).
type Attachment struct {
	Pod         string
	Node        string
	ContainerID string
	IfName      string
	State       State
	// IPs are the addresses of the last successful ADD.
	IPs    []netip.Addr
	result json.RawMessage
	// Old: the pod has moved on (a newer incarnation, or none); the
	// runtime owes this sandbox a DEL.
	Old bool
	// Forgotten: the runtime lost the sandbox (a restart); it sends no
	// more DELs and leaves it out of GC's valid list, so only GC frees it.
	Forgotten bool
	// Recorded: an ADD of it crashed at or after its commit, so safe-ipam
	// holds a committed record that the runtime never saw succeed. The
	// harness knows it from the crash point it armed, not from the
	// plugin. A retried ADD is answered from that record (the documented
	// replay) without the delegate, so with a file store it needs no
	// etcd. It matters while the state is Failed: only then is an ADD
	// retried.
	Recorded bool
	// Victim: an outside actor freed its address behind safe-ipam's back
	// (the runtime does not know, and the pod keeps using it). Calico may
	// show the address free, or under the handle of an ADD that fencing
	// quarantined for it; what must hold is that no other live attachment
	// gets it.
	Victim bool
	// QuarantinedBy: an ADD of it was fenced, so its allocation is a
	// quarantine tied to this holder (docs/design.md, "Fencing") until the holder
	// is released; until then its DEL releases nothing and calls no
	// delegate.
	QuarantinedBy *Attachment
	// Gone: its node died. No DEL or GC of it will come; Calico freed its
	// addresses (kube-controllers does), and safe-ipam must release its
	// record (the next ADD given one of them, or gc --dead-nodes) and never
	// fence on it.
	Gone bool
	// Unrecorded: its last ADD ran while safe-ipam was uninstalled from its
	// node, so no record names it (as for a pod from before install).
	Unrecorded bool
	// Alone: its last ADD ran through calico-ipam alone (safe-ipam was
	// uninstalled), which with Calico 2.x keys it by pod name; adopting it
	// records it, under that handle.
	Alone bool
}

// Quarantined says whether the attachment's allocation is still a
// quarantine: its holder has not been released.
func (a *Attachment) Quarantined() bool {
	return a.QuarantinedBy != nil && a.QuarantinedBy.State != Deleted
}

func (a *Attachment) String() string {
	return fmt.Sprintf("%s/%s@%s", a.Pod, short(a.ContainerID), a.Node)
}

// short abbreviates a container ID as runtimes print it.
func short(id string) string { return id[:min(12, len(id))] }

// cniArgs is what kubelet passes: pod identity included.
func (a *Attachment) cniArgs() string {
	return "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + Namespace + ";K8S_POD_NAME=" + a.Pod +
		";K8S_POD_INFRA_CONTAINER_ID=" + a.ContainerID + ";K8S_POD_UID=uid-" + a.Pod
}

// live says the runtime runs a pod with the attachment's addresses: its
// ADD succeeded and it has neither deleted nor forgotten it. Only live
// attachments must keep their addresses.
func (a *Attachment) live() bool { return a.State == Live && !a.Forgotten && !a.Gone }

// owes says the runtime still has to DEL the attachment.
func (a *Attachment) owes() bool {
	return a.State != Deleted && !a.Forgotten && !a.Gone && (a.Old || a.State == Deleting)
}

// Model is the runtime's view of every attachment of a history: the
// reference the invariants are checked against.
type Model struct {
	Setup Setup
	Atts  []*Attachment
	// current is each pod's running incarnation.
	current map[string]*Attachment
	// dead are the nodes that died; deadCollected says a gc --dead-nodes
	// succeeded since (no new record of a dead node can appear).
	dead          map[string]bool
	deadCollected bool
	// sighted are the dead nodes a sweep of gc --dead-nodes found gone
	// (the rulebook's first sighting, which an ADD's own read completes).
	sighted map[string]bool
	// uninstalled are the nodes where calico-ipam runs alone.
	uninstalled map[string]bool
}

// NewModel starts a history's model.
func NewModel(s Setup) *Model {
	return &Model{Setup: s, current: map[string]*Attachment{}, dead: map[string]bool{}, sighted: map[string]bool{}, uninstalled: map[string]bool{}}
}

// Incarnate makes a new sandbox for pod on node; the pod's previous
// incarnation, if any, becomes old and owes a DEL.
func (m *Model) Incarnate(pod, node, containerID string) *Attachment {
	if prev := m.current[pod]; prev != nil {
		prev.Old = true
	}
	a := &Attachment{Pod: pod, Node: node, ContainerID: containerID, IfName: IfName}
	m.Atts = append(m.Atts, a)
	m.current[pod] = a
	return a
}

// Retire ends pod's running incarnation (the pod was deleted or its
// sandbox is being replaced): it becomes old and owes a DEL.
func (m *Model) Retire(pod string) *Attachment {
	a := m.current[pod]
	if a != nil {
		a.Old = true
		delete(m.current, pod)
	}
	return a
}

// Current is pod's running incarnation, nil if none.
func (m *Model) Current(pod string) *Attachment { return m.current[pod] }

// Forget makes the runtime lose a sandbox it still owes a DEL or an ADD.
func (m *Model) Forget(a *Attachment) {
	a.Forgotten, a.Old = true, true
	if m.current[a.Pod] == a {
		delete(m.current, a.Pod)
	}
}

// Apply records what the runtime saw of a call.
func (m *Model) Apply(call Call, out Outcome) {
	switch call.Verb {
	case Add:
		a := call.Att
		if out.OK() {
			a.State, a.IPs, a.result = Live, out.IPs, out.Result
			a.Unrecorded, a.Alone = m.uninstalled[a.Node], m.uninstalled[a.Node]
		} else {
			a.State, a.IPs, a.result = Failed, nil, nil
			if holder := m.fencedBy(out); holder != nil {
				a.QuarantinedBy = holder
			}
			// A crash after the commit leaves the record; a later failed
			// retry (an outage, a crash before the record is read) does
			// not remove it.
			a.Recorded = a.Recorded || (out.Crashed && afterCommit(call.CrashAt))
		}
	case Del:
		a := call.Att
		switch {
		case a.State == Deleted: // a repeated DEL changes nothing the runtime knows
		case out.OK():
			a.State = Deleted
		default:
			a.State = Deleting
		}
	case Outside:
		call.Att.Victim = true
	case NodeDeath:
		m.kill(call.Node)
		m.deadCollected = false
	case DeadNodesGC, GCLoops:
		m.deadCollected = m.deadCollected || out.OK()
		m.sight(out)
	case DeadNodesSighting:
		m.sight(out)
	case Uninstall:
		m.uninstalled[call.Node] = true
		for _, a := range m.Atts {
			if a.Node == call.Node && a.State != Deleted {
				// Its record is forgotten: like a pod from before install,
				// it runs unrecorded until adopt or a new sandbox.
				a.Unrecorded = true
			}
			if out.OK() && a.QuarantinedBy != nil && a.QuarantinedBy.Node == call.Node {
				// Re-claimed for its holder, which runs (Calico holds the
				// address under the holder's own handle again), or released
				// with a holder whose DEL had begun: no longer this
				// attachment's. An uninstall cut short keeps it, and the
				// next run finishes.
				a.QuarantinedBy = nil
			}
		}
	case Reinstall:
		m.uninstalled[call.Node] = false
	case Adopt:
		call.Att.Unrecorded = false
	case Borrow:
		if out.OK() {
			// Through calico-ipam alone: no record names it.
			a := call.Att
			a.State, a.IPs, a.Unrecorded, a.Alone = Live, out.IPs, true, true
		}
	case GC, FormerGC: // gc --former-node collects the node's own records too
		if !out.OK() {
			return
		}
		for _, a := range m.Atts {
			// An unrecorded attachment (it ran across an uninstall) is
			// unknown to safe-ipam's GC: only its DEL frees it.
			if a.Node == call.Node && a.State != Deleted && !a.Unrecorded && !slices.Contains(call.Valid, a) {
				a.State = Deleted
			}
		}
	}
}

// sight notes, after a sweep that succeeded, that every dead node was
// found gone.
func (m *Model) sight(out Outcome) {
	if !out.OK() {
		return
	}
	for node := range m.dead {
		m.sighted[node] = true
	}
}

// kill is a node's death: its attachments are gone, and its pods start
// again elsewhere.
func (m *Model) kill(node string) {
	m.dead[node] = true
	for _, a := range m.Atts {
		if a.Node == node && a.State != Deleted {
			a.Gone = true
			if m.current[a.Pod] == a {
				delete(m.current, a.Pod)
			}
		}
	}
}

// Alive lists the nodes that have not died.
func (m *Model) Alive() []string {
	var out []string
	for _, n := range m.Setup.nodes() {
		if !m.dead[n] {
			out = append(out, n)
		}
	}
	return out
}

// Uninstalled says whether calico-ipam runs alone on node.
func (m *Model) Uninstalled(node string) bool { return m.uninstalled[node] }

// Calm says whether uninstalling from node loses nothing only safe-ipam
// would have protected or released: no victim of an outside actor, no
// quarantine, and no sandbox on node that the runtime forgot (only
// safe-ipam's GC would release it; Calico alone leaks it).
func (m *Model) Calm(node string) bool {
	for _, a := range m.Atts {
		if (a.Victim && a.State != Deleted && !a.Gone) || a.Quarantined() {
			return false
		}
		if a.Node == node && a.Forgotten && a.State != Deleted {
			return false
		}
	}
	return true
}

// AnyDead says whether a node died.
func (m *Model) AnyDead() bool { return len(m.dead) > 0 }

// needsDeadNodesGC: a dead node's records in a cluster-wide etcd store may
// be left (no ADD met them); the DaemonSet's gc --dead-nodes collects them.
func (m *Model) needsDeadNodesGC() bool {
	return m.AnyDead() && m.Setup.Store == EtcdStore && !m.deadCollected
}

// blocked is invariant 4 for one ADD: fencing may fail it only while the
// holder still runs, or the runtime still owes its DEL or GC. A holder the
// runtime deleted blocks for nothing, and so does one whose node died once
// a sweep of gc --dead-nodes found the node gone: before that, Calico's
// answer alone is one sighting, which the rulebook never takes for proof
// (issue 41, item 2.8). An outage is left out: a Calico datastore that
// does not answer is no evidence.
func (m *Model) blocked(call Call, out Outcome, outage Outage) (Violation, bool) {
	if call.Verb != Add || outage != NoOutage {
		return Violation{}, false
	}
	holder := m.fencedBy(out)
	if holder == nil || (holder.State != Deleted && !(holder.Gone && m.sighted[holder.Node])) {
		return Violation{}, false
	}
	why := "deleted by the runtime"
	if holder.Gone {
		why = "on node " + holder.Node + ", which died"
	}
	var ip netip.Addr
	if len(holder.IPs) > 0 {
		ip = holder.IPs[0]
	}
	return Violation{Invariant: InvNotBlocked, Kind: Blocked, Subject: call.Att.String(), IP: ip,
		Detail: fmt.Sprintf("ADD fenced by %s, %s: %s", holder, why, out.Msg)}, true
}

// fenced is how a fenced ADD's error names the holder of its address
// (package guard, fence.go): "... gave <addr>, which <network>/<cid>/<ifname> holds".
var fenced = regexp.MustCompile(`gave \S+, which ([^/\s]+)/([^/\s]+)/(\S+) holds`)

// fencedBy is the holder a fenced ADD's allocation is quarantined for, nil
// when the failure was not a fence.
func (m *Model) fencedBy(out Outcome) *Attachment {
	if out.Code != 11 {
		return nil
	}
	match := fenced.FindStringSubmatch(out.Msg)
	if match == nil {
		return nil
	}
	return m.find(match[1], match[2], match[3])
}

// afterCommit says whether an ADD crash point comes at or after the
// commit of its record: the ADD that crashes there leaves a committed
// record.
func afterCommit(step guard.Step) bool {
	steps := StepsOf(Add)
	at, commit := slices.Index(steps, step), slices.Index(steps, guard.AddCommitted)
	return at >= 0 && at >= commit
}

// quarantinable are the addresses fencing may keep allocated under the
// handle of another attachment, even one the runtime deleted: those of
// victims safe-ipam has not released yet, since a quarantine is released
// with its holder.
func (m *Model) quarantinable() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, a := range m.Atts {
		if a.Victim && a.State != Deleted {
			for _, ip := range a.IPs {
				out[ip] = true
			}
		}
	}
	return out
}

// Valid is the list a GC on node sends: every sandbox the runtime still
// knows there. An ADD in flight is known; a forgotten sandbox is not.
func (m *Model) Valid(node string) []*Attachment {
	var out []*Attachment
	for _, a := range m.Atts {
		if a.Node == node && a.State != Deleted && !a.Forgotten && !a.Gone {
			out = append(out, a)
		}
	}
	return out
}

// Handle is the Calico handle an attachment's addresses live under.
func (m *Model) Handle(a *Attachment) string {
	switch {
	case m.Setup.Safe() && m.Setup.Generation == Legacy && !a.Alone:
		return a.ContainerID // safe-ipam strips pod identity, so Calico 2.x keys by container
	case m.Setup.Generation == Legacy:
		return podHandle(a.Pod) // shared by every incarnation: the incident
	}
	return Network + "." + a.ContainerID
}

// HandleIsOwn says whether an attachment's handle is its alone, so that
// Calico's holdings under it can be attributed to it.
func (m *Model) HandleIsOwn() bool { return m.Setup.Safe() || m.Setup.Generation == Modern }

func podHandle(pod string) string { return Namespace + "." + pod }

// byHandle maps each handle to the attachments that allocate under it.
func (m *Model) byHandle() map[string][]*Attachment {
	out := map[string][]*Attachment{}
	for _, a := range m.Atts {
		if a.Alone && !a.live() && m.Setup.Generation == Legacy {
			continue // a pod-name handle outlives its sandbox for the pod's next one
		}
		h := m.Handle(a)
		out[h] = append(out[h], a)
	}
	return out
}

// find is the attachment a record names, nil if the runtime never made it.
func (m *Model) find(network, containerID, ifName string) *Attachment {
	if network != Network {
		return nil
	}
	for _, a := range m.Atts {
		if a.ContainerID == containerID && a.IfName == ifName {
			return a
		}
	}
	return nil
}
