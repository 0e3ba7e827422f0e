// Command chaos is the long mode of the chaos suite (`make chaos`): many
// random histories with safe-ipam in front, the whole crash matrix, every
// outage script, the same on Calico's Kubernetes datastore with its
// claims, and every mutant, which must be caught. Progress goes to
// stderr; stdout ends with one line:
//
//	chaos: <n> histories, <n> crash points, <n> outages, <n> lost, <n> duplicated
//
// It exits 1 if safe-ipam lost or duplicated an address, failed an
// expectation, or a mutant survived. A failed history prints the command
// that replays it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/chaos"
)

func main() {
	os.Exit(run())
}

type options struct {
	histories int
	seed      uint64
	parallel  int
	mutants   bool
	verbose   bool
	parts     *regexp.Regexp
}

func parseFlags() options {
	var o options
	flag.IntVar(&o.histories, "histories", 150, "random histories to play")
	flag.Uint64Var(&o.seed, "seed", 0, "seed of the first random history (0: from the clock; printed for replay)")
	flag.IntVar(&o.parallel, "parallel", 2*runtime.NumCPU(), "clusters playing at once (outages leave cores idle)")
	flag.BoolVar(&o.mutants, "mutants", true, "also build and play every mutant, which must be caught")
	flag.BoolVar(&o.verbose, "v", false, "print every history's transcript")
	parts := flag.String("parts", "", "play only the parts whose name matches this regexp (\"Kubernetes\": the Kubernetes datastore's); the control and mutants run when it is empty")
	flag.Parse()
	o.parts = regexp.MustCompile(*parts)
	if *parts != "" {
		o.mutants = false
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	return o
}

func run() int {
	o := parseFlags()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	work, err := os.MkdirTemp(chaos.TempRoot(), "safe-ipam-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	defer os.RemoveAll(work)
	root, err := chaos.ModuleRoot(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	bin, err := chaos.Build(ctx, root, work)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	r := &runner{ctx: ctx, o: o, work: work}
	sum, ok := r.all(bin, root)
	r.recap()
	fmt.Println(sum)
	if !ok {
		return 1
	}
	return 0
}

// runner plays the long mode's parts and remembers whether all passed.
type runner struct {
	ctx    context.Context
	o      options
	work   string
	failed bool
	parts  int
	// failures are the failed histories' last lines, repeated at the
	// end so that the run's output ends with them.
	failures []string
}

func (r *runner) all(bin chaos.Binaries, root string) (chaos.Summary, bool) {
	fmt.Fprintf(os.Stderr, "chaos: random histories from seed %d (replay one: CHAOS_SEED=<seed> go test ./e2e/chaos -run 'TestHistories$' -v)\n", r.o.seed)
	seeds := make([]uint64, r.o.histories)
	for i := range seeds {
		seeds[i] = r.o.seed + uint64(i)
	}
	histories := r.play("random histories", bin, chaos.RandomJobs(seeds, false))
	gens, stores := []chaos.Generation{chaos.Legacy, chaos.Modern}, []chaos.StoreKind{chaos.FileStore, chaos.EtcdStore}
	crashes := r.play("crash matrix", bin, chaos.ScriptJobs(chaos.CrashMatrix(gens, stores)...))
	outages := r.play("outage scripts", bin, chaos.ScriptJobs(outageScripts(gens, stores)...))
	outside := r.play("outside actor scripts", bin, chaos.ScriptJobs(chaos.OutsideScripts()...))
	lifecycle := r.play("lifecycle scripts", bin, chaos.ScriptJobs(append(chaos.LifecycleScripts(), chaos.ElectionScripts()...)...))
	machines := r.play("machine scripts", bin, chaos.ScriptJobs(chaos.MachineScripts()...))
	kdd := r.play("Kubernetes datastore histories", bin, chaos.ClaimsJobs(seeds[:max(1, len(seeds)/5)]))
	kddScripts := r.play("Kubernetes datastore scripts", bin, chaos.ScriptJobs(chaos.ClaimsScripts(true)...))
	if r.o.parts.String() == "" {
		r.control(bin, seeds[:min(len(seeds), 8)])
	}
	if r.o.mutants {
		r.mutants(root)
	}
	sum := chaos.Summarize(histories, crashes, outages, outside, lifecycle, machines, kdd, kddScripts)
	return sum, !r.failed && sum.Failed == 0
}

// play plays jobs and prints every failed history with its replay; a
// part -parts leaves out plays nothing.
func (r *runner) play(what string, bin chaos.Binaries, jobs []chaos.Job) []*chaos.Report {
	if !r.o.parts.MatchString(what) {
		return nil
	}
	r.parts++
	start := time.Now()
	opt := chaos.Options{Bin: bin, Dir: fmt.Sprintf("%s/part-%d", r.work, r.parts), Parallel: r.o.parallel,
		Done: func(rep *chaos.Report) {
			switch {
			case !rep.OK():
				fmt.Fprintln(os.Stderr, rep.Explain(rep.Replay()))
				r.failures = append(r.failures, rep.Summary(3)+rep.Replay())
			case r.o.verbose:
				fmt.Fprintf(os.Stderr, "%s%s\n", rep.Summary(0), strings.Join(rep.Transcript, "\n"))
			}
		}}
	reports, err := chaos.Play(r.ctx, opt, jobs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %s: harness: %v\n", what, err)
		r.failed = true
	}
	fmt.Fprintf(os.Stderr, "chaos: %s: %s in %s\n", what, chaos.Summarize(reports), time.Since(start).Round(time.Second))
	return reports
}

// control plays histories against calico-ipam alone: the checker must
// find what safe-ipam prevents, or its silence means nothing.
func (r *runner) control(bin chaos.Binaries, seeds []uint64) {
	r.parts++
	opt := chaos.Options{Bin: bin, Dir: fmt.Sprintf("%s/part-%d", r.work, r.parts), Parallel: r.o.parallel}
	reports, err := chaos.Play(r.ctx, opt, chaos.RandomJobs(seeds, true))
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: control: harness: %v\n", err)
		r.failed = true
		return
	}
	sum := chaos.Summarize(reports)
	fmt.Fprintf(os.Stderr, "chaos: control (calico-ipam alone, Calico 2.x handles): %s\n", sum)
	if sum.Duplicated == 0 {
		fmt.Fprintln(os.Stderr, "chaos: FAIL: the control duplicated nothing: the checker cannot see the incident")
		r.failed = true
	}
}

// mutants builds every deliberately broken safe-ipam; each must break an
// invariant in its catchers or in the first random histories.
func (r *runner) mutants(root string) {
	for _, mu := range chaos.Mutants() {
		r.parts++
		dir := fmt.Sprintf("%s/part-%d", r.work, r.parts)
		bin, err := mu.Build(r.ctx, root, dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: mutant %s: %v\n", mu.Name, err)
			r.failed = true
			continue
		}
		jobs := append(mu.Catchers(), chaos.RandomJobs([]uint64{1, 2, 3, 4}, false)...)
		opt := chaos.Options{Bin: bin, Dir: dir + "/clusters", Parallel: r.o.parallel}
		reports, err := chaos.Play(r.ctx, opt, jobs)
		caught, how := mu.Caught(reports)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "chaos: mutant %s: harness: %v\n", mu.Name, err)
			r.failed = true
		case !caught:
			fmt.Fprintf(os.Stderr, "chaos: FAIL: mutant %s survived (%s)\n", mu.Name, mu.Breaks)
			r.failed = true
		default:
			fmt.Fprintf(os.Stderr, "chaos: mutant %s caught: %s (reproduce: go test ./e2e/chaos -run 'TestMutants/%s' -v)\n", mu.Name, how, mu.Name)
		}
	}
}

// recap repeats every failed history, with what it broke and its
// replay, after everything else has run.
func (r *runner) recap() {
	if len(r.failures) == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "chaos: %d failed histories (transcripts above):\n", len(r.failures))
	for _, f := range r.failures {
		fmt.Fprintln(os.Stderr, f)
	}
}

func outageScripts(gens []chaos.Generation, stores []chaos.StoreKind) []func() *chaos.Script {
	var out []func() *chaos.Script
	for _, g := range gens {
		for _, st := range stores {
			out = append(out, func() *chaos.Script { return chaos.OutageScript(g, st) })
			for _, t := range []time.Duration{0, 5 * time.Millisecond, 15 * time.Millisecond, 30 * time.Millisecond} {
				out = append(out, func() *chaos.Script { return chaos.AmidOutageScript(g, st, t, 40*t) })
			}
		}
	}
	return out
}
