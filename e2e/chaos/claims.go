package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// The histories of Calico's Kubernetes datastore (ClaimsStore): each
// node's records in its file store, their addresses claimed cluster-wide
// in the API server Calico's data is in (docs/design.md, "Cluster-wide
// claims"). The API server stops for outages; safe-ipam is killed at
// every crash point, including the two between a claim and its record.

// ClaimsSteps are the crash points of the claims store, between the
// node's record and its claims.
var ClaimsSteps = []guard.Step{guard.Step(claims.Claimed), guard.Step(claims.MarkedClaimed)}

// claimsStepsOf are the claims' crash points a verb reaches: the ADD's
// and the DEL's (GC marks through Swap, which has none).
func claimsStepsOf(v Verb) []guard.Step {
	var out []guard.Step
	for _, s := range ClaimsSteps {
		if v == Add && strings.HasPrefix(string(s), "add-") || v == Del && strings.HasPrefix(string(s), "del-") {
			out = append(out, s)
		}
	}
	return out
}

// ClaimsCrashMatrix is every crash point, the claims' own included, with
// every follow-up, for each generation, on Calico's Kubernetes datastore.
func ClaimsCrashMatrix(gens []Generation) []func() *Script {
	return crashMatrix(append(append([]guard.Step(nil), guard.Steps...), ClaimsSteps...), gens, []StoreKind{ClaimsStore})
}

// ClaimsOutsideScript is issue 45's story: web-0 runs on node1 with X; an
// outside actor frees X behind its back, and X's block becomes node2's.
// node2 starts pods until Calico hands it X: node1's claim fences that
// ADD (error 11, the allocation quarantined for web-0's claim), where
// Calico alone would start a second pod with X. Once web-0 is deleted,
// node2's gc (two rounds, no grace) finds the claim gone and releases
// the quarantine, and a new sandbox of the fenced pod is given X.
func ClaimsOutsideScript(gen Generation, by string) *Script {
	s := &Script{
		Name:  fmt.Sprintf("claims/outside-across-nodes/%s/%s", by, gen),
		Setup: Setup{Generation: gen, Store: ClaimsStore, Nodes: 2, Pool: SinglePool, HostLock: true},
	}
	s.start("web-0", node1, "", Succeeds)
	s.outside(0, by)
	s.then(func(*Model) Step {
		return single(Call{Verb: AffinityMove, Node: node2, Lender: node1}, Succeeds, "node1's block becomes node2's")
	})
	for _, pod := range []string{"web-1", "web-2", "web-3"} {
		s.start(pod, node2, "", Succeeds)
	}
	s.start("web-4", node2, "", TryAgain) // given X: fenced on node1's claim
	s.then(func(m *Model) Step {
		m.Retire("web-0")
		return single(Call{Verb: Del, Node: node1, Att: m.Atts[0]}, Succeeds, "web-0 is deleted")
	})
	s.then(func(*Model) Step {
		return single(Call{Verb: DeadNodesGC, Node: node2}, Succeeds, "node2's gc finds web-0's claim gone, twice")
	})
	return s.start("web-4", node2, "", Succeeds)
}

// ClaimsRenameScript (issue 45, owners): node1 gets a new Calico name
// while web-0 and web-1 run; their records stay in its file store, as
// committed under the old name, with their claims. Their DELs under the
// new name must release the claims their records made: kept, a claim
// with no record would fence its address on every node once Calico
// frees it (the checker holds the claims to the records). No pod starts
// after the rename: the new name is no Kubernetes Node here.
func ClaimsRenameScript() *Script {
	s := &Script{
		Name:  "claims/rename/calico-node",
		Setup: Setup{Generation: Modern, Store: ClaimsStore, Nodes: 1, Pool: WidePool, HostLock: true, Hosts: true},
	}
	s.start("web-0", node1, "", Succeeds).start("web-1", node1, "", Succeeds)
	s.then(func(*Model) Step {
		return single(Call{Verb: NodeRename, Node: node1, Name: "node1-renamed"}, Succeeds, "node1 restarts under a new Calico name")
	})
	// web-1's DEL is killed between its mark and its claims' release, and
	// retried: the mark already carries the new name.
	s.del(0, "", Succeeds).del(1, guard.Step(claims.MarkedClaimed), Crashes)
	return s.del(1, "", Succeeds)
}

// ClaimsScripts are the Kubernetes datastore's fixed histories. The short
// set (make test) plays the claims' own crash points with every follow-up
// and both generations, and every other crash point with one follow-up,
// rotating; the long one (make chaos) the whole matrix, and more outage
// timings.
func ClaimsScripts(long bool) []func() *Script {
	gens := []Generation{Legacy, Modern}
	var out []func() *Script
	for i, mk := range ClaimsCrashMatrix(gens) {
		s := mk()
		claimsPoint := strings.Contains(s.Name, string(claims.Claimed)+"/") || strings.Contains(s.Name, string(claims.MarkedClaimed)+"/")
		if long || claimsPoint || i%6 == 0 {
			out = append(out, mk)
		}
	}
	timings := [][2]time.Duration{{10 * time.Millisecond, 200 * time.Millisecond}, {25 * time.Millisecond, 1200 * time.Millisecond}}
	if long {
		timings = append(timings, [2]time.Duration{0, 0}, [2]time.Duration{5 * time.Millisecond, 2 * time.Second})
	}
	for _, g := range gens {
		out = append(out, func() *Script { return OutageScript(g, ClaimsStore) })
	}
	for _, t := range timings {
		out = append(out, func() *Script { return AmidOutageScript(Modern, ClaimsStore, t[0], t[1]) })
	}
	return append(out, ClaimsRenameScript,
		func() *Script { return ClaimsOutsideScript(Modern, OutsideCalicoDel) },
		func() *Script { return ClaimsOutsideScript(Legacy, OutsideIPAMRelease) })
}
