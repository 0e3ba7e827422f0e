package chaos

import "testing"

// TestElection: node1 dies, and a fault in the election of the gc
// --dead-nodes loops (a dry-run loop, a leader whose sweeps fail, a
// leader killed mid-sweep, a leader key without a lease) must not keep
// node1's records from being released: node3's loop releases them
// within a bound, and node2's ADD given node1's freed address succeeds.
// CHAOS_SCRIPT=election/<fault> replays one.
func TestElection(t *testing.T) {
	bin := binaries(t)
	reports := play(t, bin, ScriptJobs(filterScripts(ElectionScripts())...))
	requireOK(t, reports)
	t.Log(Summarize(reports))
}
