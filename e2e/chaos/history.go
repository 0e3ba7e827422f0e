package chaos

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Expect is what a call must do, beyond keeping the invariants.
type Expect int

// Expectations.
const (
	AnyOutcome Expect = iota
	Succeeds
	Crashes
	Fails
	// TryAgain: fails with code 11, the code a runtime retries on.
	TryAgain
)

func (e Expect) String() string {
	return [...]string{"any outcome", "success", "a crash", "a failure", "error 11"}[e]
}

// met says whether an outcome satisfies the expectation.
func (e Expect) met(o Outcome) bool {
	switch e {
	case Succeeds:
		return o.OK()
	case Crashes:
		return o.Crashed
	case Fails:
		return !o.OK() && !o.Crashed
	case TryAgain:
		return !o.Crashed && o.Code == 11
	}
	return true
}

// Outage is how etcd fails during a step.
type Outage int

// Outages. Between: etcd is down for the whole step, so the calls must
// fail and change nothing. Amid: etcd stops after PauseAfter, while calls
// run, and starts again ResumeAfter later, whatever they are doing.
// Partition: once a held call's delegate ADD starts, the store's requests
// still reach etcd but its answers are lost, until the calls end.
const (
	NoOutage Outage = iota
	Between
	Amid
	Partition
)

// Step is what the runtime does at one moment: calls run at once by
// parallel workers, perhaps while etcd fails.
type Step struct {
	Calls  []Call
	Expect []Expect // per call; missing entries mean AnyOutcome
	Outage Outage
	// PauseAfter and ResumeAfter time an Amid outage.
	PauseAfter, ResumeAfter time.Duration
	// Note says what the runtime did besides the calls (a pod replaced,
	// a sandbox forgotten), for the transcript.
	Note string
}

// add appends a call with its expectation.
func (s *Step) add(c Call, e Expect) {
	s.Calls = append(s.Calls, c)
	s.Expect = append(s.Expect, e)
}

// named are the attachments a step's calls concern: the ADD's and DEL's,
// and those a GC may collect.
func (s Step) named(m *Model) map[*Attachment]bool {
	out := map[*Attachment]bool{}
	for _, c := range s.Calls {
		if c.Att != nil {
			out[c.Att] = true
		}
		if c.Verb == GC {
			for _, a := range m.Atts {
				if a.Node == c.Node && !slices.Contains(c.Valid, a) {
					out[a] = true
				}
			}
		}
	}
	return out
}

// Schedule produces a history's steps, reading the model so that it does
// what a runtime would do next.
type Schedule interface {
	// Next returns the next step, or false when the history is over.
	Next(m *Model) (Step, bool)
	// DrainByGC says whether the runtime ends by GC alone rather than by
	// DELs, and a GC with nothing valid.
	DrainByGC() bool
}

// Report is what playing one history observed.
type Report struct {
	Name       string
	Seed       uint64
	Setup      Setup
	Steps      int
	Calls      int
	Crashes    int
	Outages    int
	Violations []StepViolation
	// Failures are calls that did not do what they must (an ADD during an
	// outage that succeeded, a DEL that failed with etcd up) and outages
	// that changed something.
	Failures   []string
	Transcript []string
}

// StepViolation is a violation found after a step.
type StepViolation struct {
	Step int
	Violation
}

// Harms counts the distinct addresses (or records) of each kind that the
// history lost or duplicated.
func (r *Report) Harms() map[Kind]int {
	seen := map[string]bool{}
	out := map[Kind]int{}
	for _, v := range r.Violations {
		if !seen[v.harm()] {
			seen[v.harm()] = true
			out[v.Kind]++
		}
	}
	return out
}

// OK says the history kept every invariant and expectation.
func (r *Report) OK() bool { return len(r.Violations) == 0 && len(r.Failures) == 0 }

// Summary is a short account of what went wrong, first occurrences first.
func (r *Report) Summary(limit int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "history %s (%s): %d steps, %d calls, %d crashes, %d outages\n", r.Name, r.Setup, r.Steps, r.Calls, r.Crashes, r.Outages)
	for i, f := range r.Failures {
		if i == limit {
			fmt.Fprintf(&b, "  ... %d more failures\n", len(r.Failures)-limit)
			break
		}
		fmt.Fprintf(&b, "  FAILURE %s\n", f)
	}
	shown, seen := 0, map[string]bool{}
	for _, v := range r.Violations {
		if seen[v.harm()+v.Detail] {
			continue // the same harm, seen again at a later step
		}
		seen[v.harm()+v.Detail] = true
		if shown++; shown > limit {
			fmt.Fprintf(&b, "  ... more violations in the transcript\n")
			break
		}
		fmt.Fprintf(&b, "  step %d: %s\n", v.Step, v.Violation)
	}
	return b.String()
}

// Replay is the command that plays a failed history again.
func (r *Report) Replay() string {
	if strings.HasPrefix(r.Name, "regression-seed-") {
		return "replay: go test ./e2e/chaos -run 'TestHistories$' -v"
	}
	if strings.HasPrefix(r.Name, "claims-seed-") {
		return fmt.Sprintf("replay: CHAOS_SEED=%d go test ./e2e/chaos -run 'TestClaims$' -v", r.Seed)
	}
	if strings.HasPrefix(r.Name, "seed-") {
		return fmt.Sprintf("replay: CHAOS_SEED=%d go test ./e2e/chaos -run 'TestHistories$' -v", r.Seed)
	}
	if strings.HasPrefix(r.Name, "control-") {
		return fmt.Sprintf("replay: CHAOS_SEED=%d go test ./e2e/chaos -run 'TestControl' -v", r.Seed)
	}
	if strings.HasPrefix(r.Name, "election/") {
		return fmt.Sprintf("replay: CHAOS_SCRIPT=%s go test ./e2e/chaos -run TestElection -v", r.Name)
	}
	if r.Setup.Kube() {
		return fmt.Sprintf("replay: CHAOS_SCRIPT=%s go test ./e2e/chaos -run 'TestClaims' -v", r.Name)
	}
	return fmt.Sprintf("replay: CHAOS_SCRIPT=%s go test ./e2e/chaos -run 'TestCrashPoints|TestOutages|TestRegressions|TestOutsideActor|TestLifecycle|TestMachines' -v", r.Name)
}

// Explain is a failed history's account for a log. It ends with what a
// reader needs first: the history's name (its seed) and setup, the
// expectations and invariants it broke, and the command that replays it.
func (r *Report) Explain(replay string) string {
	return "transcript:\n  " + strings.Join(r.Transcript, "\n  ") + "\n" + r.Summary(20) + replay
}

// Player plays histories on a cluster and checks every step.
type Player struct {
	Cluster *Cluster
	// Logf, when set, receives the transcript as it happens.
	Logf func(format string, args ...any)
}

// Play runs one history from a fresh cluster state. An error means the
// harness failed (etcd would not start, a plugin hung), not safe-ipam.
func (p *Player) Play(ctx context.Context, name string, seed uint64, setup Setup, sched Schedule) (*Report, error) {
	if err := p.Cluster.Reset(ctx, setup); err != nil {
		return nil, err
	}
	h := &history{p: p, ctx: ctx, m: NewModel(setup), rep: &Report{Name: name, Seed: seed, Setup: setup}}
	if err := h.play(sched); err != nil {
		return h.rep, fmt.Errorf("history %s: %w", name, err)
	}
	return h.rep, nil
}

// history is one history being played.
type history struct {
	p    *Player
	ctx  context.Context
	m    *Model
	rep  *Report
	prev *Observation
}

func (h *history) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	h.rep.Transcript = append(h.rep.Transcript, line)
	if h.p.Logf != nil {
		h.p.Logf("%s", line)
	}
}

func (h *history) play(sched Schedule) error {
	var err error
	if h.prev, err = h.p.Cluster.Observe(h.ctx); err != nil {
		return err
	}
	for {
		step, more := sched.Next(h.m)
		if !more {
			break
		}
		if err := h.run(step); err != nil {
			return err
		}
	}
	if err := h.drain(sched.DrainByGC()); err != nil {
		return err
	}
	if h.drained() { // else drain reported the runtime's failure already
		for _, v := range CheckDrained(h.m, h.prev) {
			h.violation(h.rep.Steps, v)
		}
	}
	return nil
}

// run plays one step, checks its calls' expectations and the invariants.
func (h *history) run(step Step) error {
	h.rep.Steps++
	n := h.rep.Steps
	if step.Note != "" {
		h.logf("step %d: %s", n, step.Note)
	}
	outcomes, err := h.execute(step)
	if err != nil {
		return fmt.Errorf("step %d: %w", n, err)
	}
	named := step.named(h.m)
	// Fencing is judged against what the runtime knew when the step began:
	// a holder deleted by a call of the same step was still owed its DEL.
	for i, call := range step.Calls {
		if v, ok := h.m.blocked(call, outcomes[i], step.Outage); ok {
			h.violation(n, v)
		}
	}
	for i, call := range step.Calls {
		out := outcomes[i]
		h.rep.Calls++
		if out.Crashed {
			h.rep.Crashes++
		}
		h.logf("step %d: %s -> %s", n, call, out)
		if i < len(step.Expect) && !step.Expect[i].met(out) {
			h.fail("step %d: %s must give %s, gave %s; its stderr ends:\n%s", n, call, step.Expect[i], out, tail(out.Stderr, 5))
		}
		h.m.Apply(call, out)
	}
	obs, err := h.p.Cluster.Observe(h.ctx)
	if err != nil {
		return fmt.Errorf("step %d: %w", n, err)
	}
	if step.Outage == Between {
		h.unchangedByOutage(n, step, obs, named)
	}
	for _, v := range CheckStep(h.m, h.prev, obs, named) {
		h.violation(n, v)
	}
	h.prev = obs
	return nil
}

func (h *history) violation(step int, v Violation) {
	h.rep.Violations = append(h.rep.Violations, StepViolation{Step: step, Violation: v})
	h.logf("step %d: VIOLATION %s", step, v)
}

func (h *history) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.rep.Failures = append(h.rep.Failures, msg)
	h.logf("FAILURE %s", msg)
}

// execute runs the step's calls at once, with the step's outage.
func (h *history) execute(step Step) ([]Outcome, error) {
	c := h.p.Cluster
	if step.Outage != NoOutage {
		h.rep.Outages++
	}
	if step.Outage == Between {
		c.Pause()
		defer func() { _ = c.Resume() }() // also on error; the error below reports a failed resume
	}
	holdDir, err := h.holdDir(step)
	if err != nil {
		return nil, err
	}
	outcomes := make([]Outcome, len(step.Calls))
	errs := make([]error, len(step.Calls)+1)
	var wg sync.WaitGroup
	for i, call := range step.Calls {
		if call.Hold {
			call.holdDir = holdDir
		}
		wg.Go(func() { outcomes[i], errs[i] = c.Invoke(h.ctx, call) })
	}
	switch step.Outage {
	case Amid:
		wg.Go(func() { errs[len(step.Calls)] = h.outageAmid(step) })
	case Partition:
		errs[len(step.Calls)] = h.partition(holdDir, &wg)
	}
	wg.Wait()
	if step.Outage == Between {
		errs[len(step.Calls)] = c.Resume()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return outcomes, nil
}

func (h *history) outageAmid(step Step) error {
	if !sleep(h.ctx, step.PauseAfter) {
		return h.ctx.Err()
	}
	h.p.Cluster.Pause()
	if !sleep(h.ctx, step.ResumeAfter) {
		_ = h.p.Cluster.Resume()
		return h.ctx.Err()
	}
	return h.p.Cluster.Resume()
}

func (h *history) holdDir(step Step) (string, error) {
	if step.Outage != Partition {
		return "", nil
	}
	return os.MkdirTemp(h.p.Cluster.work, "hold-")
}

// partition cuts the store's answers once a held delegate ADD has started
// (the pending record is written; the commit is next), lets the ADD go
// on, and heals when every call has ended.
func (h *history) partition(holdDir string, calls *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { calls.Wait(); close(done) }()
	proxy := h.p.Cluster.proxy
	defer proxy.Heal()
	for {
		if _, err := os.Stat(filepath.Join(holdDir, "held")); err == nil {
			proxy.Blackhole()
			if err := os.WriteFile(filepath.Join(holdDir, "go"), nil, 0o600); err != nil {
				return err
			}
			break
		}
		select {
		case <-done:
			return nil
		case <-h.ctx.Done():
			return h.ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case <-done:
		return nil
	case <-h.ctx.Done():
		return h.ctx.Err()
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// unchangedByOutage: calls made while etcd was down change nothing in
// Calico's data, nor any record in an etcd store. A file store may keep
// the pending or releasing record of a named attachment, which is how
// safe-ipam remembers to release it, but never a new committed one.
func (h *history) unchangedByOutage(n int, step Step, obs *Observation, named map[*Attachment]bool) {
	before, after := describeAllocations(h.prev), describeAllocations(obs)
	if !maps.Equal(before, after) {
		h.fail("step %d: calls during an etcd outage changed Calico's allocations from %v to %v", n, before, after)
	}
	for att, r := range obs.Records {
		old := h.prev.Records[att]
		if old != nil && old.Revision == r.Revision {
			continue
		}
		a := h.m.find(att.Network, att.ContainerID, att.IfName)
		if h.m.Setup.Store == EtcdStore || a == nil || !named[a] || r.State == record.Committed {
			h.fail("step %d: calls during an etcd outage changed the record of %s to %s", n, att, r.State)
		}
	}
	// A file store answers without etcd: uninstall forgets there every
	// record it can, and stops at the first quarantine it cannot re-claim.
	forgets := h.m.Setup.fileRecords() && slices.ContainsFunc(step.Calls, func(c Call) bool { return c.Verb == Uninstall })
	for att := range h.prev.Records {
		if _, ok := obs.Records[att]; !ok && !forgets {
			h.fail("step %d: calls during an etcd outage deleted the record of %s", n, att)
		}
	}
}

// tail is the last n lines of a plugin's stderr, indented for reports.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "    " + strings.Join(lines, "\n    ")
}
