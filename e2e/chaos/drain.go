package chaos

import (
	"fmt"
	"strings"
)

// drainRounds bounds the runtime's retries at the end of a history. With
// etcd up and no crash armed every call must succeed the first time, so
// one round of DELs and one of GC suffice; the rest is slack that turns
// a failing DEL into a reported failure instead of a loop.
const drainRounds = 4

// drain is the end of every history: the runtime deletes every sandbox
// it knows, or leaves them all to a GC that lists nothing as valid, and
// GC collects what it forgot. Crash points stay disarmed, so a failure
// here is one.
func (h *history) drain(byGC bool) error {
	for round := 0; round < drainRounds && !h.drained(); round++ {
		if err := h.run(h.drainStep(byGC)); err != nil {
			return err
		}
	}
	if !h.drained() {
		h.fail("the runtime could not delete every attachment in %d rounds: %s", drainRounds, h.undeleted())
	}
	return nil
}

func (h *history) drainStep(byGC bool) Step {
	step := Step{Note: "drain: the runtime deletes every sandbox it knows"}
	for _, a := range h.m.Atts {
		// Calico's main plugin passes no GC to calico-ipam: an uninstalled
		// node's runtime DELs; and safe-ipam's GC does not know what ran
		// across an uninstall.
		gcs := byGC && h.m.Setup.Safe() && !h.m.Uninstalled(a.Node) && !a.Unrecorded
		if a.State != Deleted && !a.Forgotten && !a.Gone && !gcs {
			step.add(Call{Verb: Del, Node: a.Node, Att: a}, Succeeds)
		}
	}
	if len(step.Calls) > 0 {
		return step
	}
	if h.attachmentsDone() && h.m.needsDeadNodesGC() {
		step.Note = "drain: the DaemonSet's gc --dead-nodes on a node that lives"
		step.add(Call{Verb: DeadNodesGC, Node: h.m.Alive()[0]}, Succeeds)
		return step
	}
	step.Note = "drain: GC on every node lists only what still runs"
	for _, node := range h.m.Alive() {
		if h.m.Uninstalled(node) {
			continue // Calico's main plugin passes no GC to calico-ipam
		}
		valid := h.m.Valid(node)
		if byGC {
			valid = nil
		}
		step.add(Call{Verb: GC, Node: node, Valid: valid}, Succeeds)
	}
	return step
}

// drained: every attachment is deleted (or died with its node), and the
// records of a dead node were collected.
func (h *history) drained() bool {
	return h.attachmentsDone() && !h.m.needsDeadNodesGC()
}

func (h *history) attachmentsDone() bool {
	for _, a := range h.m.Atts {
		if a.State != Deleted && !a.Gone {
			return false
		}
	}
	return true
}

func (h *history) undeleted() string {
	var out []string
	for _, a := range h.m.Atts {
		if a.State != Deleted && !a.Gone {
			out = append(out, fmt.Sprintf("%s (%s)", a, a.State))
		}
	}
	if h.m.needsDeadNodesGC() {
		out = append(out, "the dead node's records (gc --dead-nodes failed)")
	}
	return strings.Join(out, ", ")
}
