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
	if !byGC || !h.m.Setup.Safe() {
		for _, a := range h.m.Atts {
			if a.State != Deleted && !a.Forgotten {
				step.add(Call{Verb: Del, Node: a.Node, Att: a}, Succeeds)
			}
		}
		if len(step.Calls) > 0 {
			return step
		}
	}
	step.Note = "drain: GC on every node lists only what still runs"
	for _, node := range h.m.Setup.nodes() {
		valid := h.m.Valid(node)
		if byGC {
			valid = nil
		}
		step.add(Call{Verb: GC, Node: node, Valid: valid}, Succeeds)
	}
	return step
}

func (h *history) drained() bool {
	for _, a := range h.m.Atts {
		if a.State != Deleted {
			return false
		}
	}
	return true
}

func (h *history) undeleted() string {
	var out []string
	for _, a := range h.m.Atts {
		if a.State != Deleted {
			out = append(out, fmt.Sprintf("%s (%s)", a, a.State))
		}
	}
	return strings.Join(out, ", ")
}
