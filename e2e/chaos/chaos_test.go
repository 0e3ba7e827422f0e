package chaos

import (
	"os"
	"strings"
	"testing"
	"time"
)

// shortSeeds are the random histories `make test` plays: eight
// consecutive seeds cover both generations, both stores, one and two
// nodes (see SetupFor).
var shortSeeds = seedRange(1, 8)

// regressionSeeds are random histories that once failed and always run
// beside shortSeeds, as the generator made them then (RegressionJobs).
// Each also has a script that pins its case.
var regressionSeeds = []uint64{
	186559945, // an ADD retried during an outage over the record of a crashed commit: RecordedRetryInOutageScript
	607448584, // the DEL of a quarantined attachment during an outage, answered from the file store: TestOutageExpectForAQuarantinedDel
}

// TestHistories plays the short set of random histories with safe-ipam in
// front; every invariant must hold after every step. CHAOS_SEED=<n>
// replays one history, CHAOS_TRANSCRIPT=1 with -v prints it as it runs.
func TestHistories(t *testing.T) {
	bin := binaries(t)
	jobs := RandomJobs(seedsFromEnv(t, shortSeeds), false)
	if os.Getenv("CHAOS_SEED") == "" {
		jobs = append(jobs, RegressionJobs(regressionSeeds)...)
	}
	reports := play(t, bin, jobs)
	requireOK(t, reports)
	t.Log(Summarize(reports))
}

// TestControlViolates shows the checker can fail: the same generator, run
// against calico-ipam alone with Calico 2.x handles, must find a late or
// repeated DEL that releases a live pod's address.
func TestControlViolates(t *testing.T) {
	bin := binaries(t)
	reports := play(t, bin, RandomJobs(seedsFromEnv(t, seedRange(1, 4)), true))
	caught := 0
	for _, r := range reports {
		if len(r.Failures) > 0 {
			t.Errorf("control %s failed an expectation: %s", r.Name, r.Summary(5))
		}
		for _, v := range r.Violations {
			if v.Invariant == InvOneHolder || v.Invariant == InvOwnRelease {
				caught++
				t.Logf("%s step %d: %s", r.Name, v.Step, v.Violation)
				break
			}
		}
	}
	if caught == 0 {
		t.Fatalf("no control history broke invariant 1 or 3: the checker cannot see the incident\n%s", Summarize(reports))
	}
	t.Logf("%d of %d control histories broke invariant 1 or 3; %s", caught, len(reports), Summarize(reports))
}

// TestCrashPoints kills safe-ipam at every crash point of ADD, DEL and
// GC, and follows each with every reaction of the runtime. `make test`
// spreads the cells over both generations and stores; `make chaos` plays
// each cell with every combination.
func TestCrashPoints(t *testing.T) {
	bin := binaries(t)
	var scripts []func() *Script
	gens, stores := []Generation{Legacy, Modern}, []StoreKind{FileStore, EtcdStore}
	for i, mk := range CrashMatrix(gens, stores) {
		// Of the four combinations of each cell keep one, rotating; a
		// replay (CHAOS_SCRIPT) may name any.
		if comboIndex(mk().Setup) == i/4%4 || os.Getenv("CHAOS_SCRIPT") != "" {
			scripts = append(scripts, mk)
		}
	}
	reports := play(t, bin, ScriptJobs(filterScripts(scripts)...))
	requireOK(t, reports)
	t.Log(Summarize(reports))
}

func comboIndex(s Setup) int {
	n := 0
	if s.Generation == Modern {
		n++
	}
	if s.Store == EtcdStore {
		n += 2
	}
	return n
}

// TestOutages stops etcd, which holds both Calico's data and safe-ipam's
// etcd records, for a whole step (everything must fail, ADD with 11 when
// the records are in etcd, and change nothing) and amid concurrent calls.
func TestOutages(t *testing.T) {
	bin := binaries(t)
	var scripts []func() *Script
	for _, g := range []Generation{Legacy, Modern} {
		for _, st := range []StoreKind{FileStore, EtcdStore} {
			scripts = append(scripts, func() *Script { return OutageScript(g, st) })
		}
	}
	for _, timing := range [][2]time.Duration{{0, 0}, {10 * time.Millisecond, 200 * time.Millisecond}, {25 * time.Millisecond, 1200 * time.Millisecond}} {
		for _, st := range []StoreKind{FileStore, EtcdStore} {
			scripts = append(scripts, func() *Script { return AmidOutageScript(Modern, st, timing[0], timing[1]) })
		}
	}
	reports := play(t, bin, ScriptJobs(filterScripts(scripts)...))
	requireOK(t, reports)
	t.Log(Summarize(reports))
}

// TestRegressions replays the safe-ipam bugs this suite found.
func TestRegressions(t *testing.T) {
	bin := binaries(t)
	reports := play(t, bin, ScriptJobs(filterScripts([]func() *Script{
		CrossNodeGCScript,
		func() *Script { return InvalidUTF8IfNameScript(FileStore) },
		func() *Script { return InvalidUTF8IfNameScript(EtcdStore) },
		func() *Script { return AmbiguousCommitScript(Legacy) },
		func() *Script { return AmbiguousCommitScript(Modern) },
		func() *Script { return RecordedRetryInOutageScript(FileStore) },
		func() *Script { return RecordedRetryInOutageScript(EtcdStore) },
	})...))
	requireOK(t, reports)
}

// TestOutsideActor: an actor behind safe-ipam's back frees a running
// pod's address; fencing keeps it from every other pod until the pod is
// deleted, and nothing leaks. The random histories have the actor too.
func TestOutsideActor(t *testing.T) {
	bin := binaries(t)
	reports := play(t, bin, ScriptJobs(filterScripts(OutsideScripts())...))
	requireOK(t, reports)
	t.Log(Summarize(reports))
}

// TestLifecycle: a node dies and its addresses come back through Calico;
// safe-ipam settles the dead node's records (the ADD given one of their
// addresses, or gc --dead-nodes) and blocks nothing (invariant 4).
func TestLifecycle(t *testing.T) {
	bin := binaries(t)
	reports := play(t, bin, ScriptJobs(filterScripts(LifecycleScripts())...))
	requireOK(t, reports)
	t.Log(Summarize(reports))
}

// filterScripts keeps the scripts whose name contains CHAOS_SCRIPT, to
// replay one.
func filterScripts(scripts []func() *Script) []func() *Script {
	want := os.Getenv("CHAOS_SCRIPT")
	if want == "" {
		return scripts
	}
	var out []func() *Script
	for _, mk := range scripts {
		if strings.Contains(mk().Name, want) {
			out = append(out, mk)
		}
	}
	return out
}

// TestMachines: machines under a shared or changed name, a borrowed
// block, and the admin tools that must keep every running pod's address
// there (repair, gc --former-node).
func TestMachines(t *testing.T) {
	bin := binaries(t)
	reports := play(t, bin, ScriptJobs(filterScripts(MachineScripts())...))
	requireOK(t, reports)
	t.Log(Summarize(reports))
}

// TestClaims plays histories on Calico's Kubernetes datastore, where each
// node's records are claimed cluster-wide in the API server: the crash
// points (those between a claim and its record too), the API server's
// outages, and an address freed behind a running pod's back and handed
// to another node.
func TestClaims(t *testing.T) {
	bin := binaries(t)
	var jobs []Job
	if os.Getenv("CHAOS_SCRIPT") == "" {
		jobs = ClaimsJobs(seedsFromEnv(t, seedRange(1, 4)))
	}
	if os.Getenv("CHAOS_SEED") == "" {
		jobs = append(jobs, ScriptJobs(filterScripts(ClaimsScripts(os.Getenv("CHAOS_SCRIPT") != ""))...)...)
	}
	reports := play(t, bin, jobs)
	requireOK(t, reports)
	t.Log(Summarize(reports))
}
