package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Job is one history to play.
type Job struct {
	Name  string
	Seed  uint64
	Setup Setup
	// Schedule makes the history's schedule; schedules hold state, so
	// each play gets a new one.
	Schedule func() Schedule
}

// RandomJobs are the generated histories of seeds, with safe-ipam in
// front, or calico-ipam alone when control is set.
func RandomJobs(seeds []uint64, control bool) []Job {
	jobs := make([]Job, 0, len(seeds))
	for _, seed := range seeds {
		setup, name := SetupFor(seed), fmt.Sprintf("seed-%d", seed)
		if control {
			setup, name = ControlSetup(seed), fmt.Sprintf("control-seed-%d", seed)
		}
		jobs = append(jobs, Job{Name: name, Seed: seed, Setup: setup,
			Schedule: func() Schedule { return NewGenerator(seed, setup) }})
	}
	return jobs
}

// ClaimsJobs are random histories on Calico's Kubernetes datastore: each
// seed's setup (SetupFor) with the claims store, on one node or two, with
// Calico 2.x or 3.x handles.
func ClaimsJobs(seeds []uint64) []Job {
	jobs := make([]Job, 0, len(seeds))
	for _, seed := range seeds {
		setup := SetupFor(seed)
		setup.Store, setup.SharedPrefix, setup.Nodes = ClaimsStore, false, 1+int(seed/2%2)
		jobs = append(jobs, Job{Name: fmt.Sprintf("claims-seed-%d", seed), Seed: seed, Setup: setup,
			Schedule: func() Schedule { return NewGenerator(seed, setup) }})
	}
	return jobs
}

// RegressionJobs replay seeds whose histories once failed, as the
// generator made them then: without the outside actor, which came later
// and changes a history from its first act on.
func RegressionJobs(seeds []uint64) []Job {
	jobs := make([]Job, 0, len(seeds))
	for _, seed := range seeds {
		setup := SetupFor(seed)
		jobs = append(jobs, Job{Name: fmt.Sprintf("regression-seed-%d", seed), Seed: seed, Setup: setup,
			Schedule: func() Schedule {
				g := NewGenerator(seed, setup)
				g.outside = nil
				return g
			}})
	}
	return jobs
}

// ScriptJobs are fixed histories. Scripts hold state: a script's job
// builds it anew from make on every play.
func ScriptJobs(scripts ...func() *Script) []Job {
	jobs := make([]Job, 0, len(scripts))
	for _, mk := range scripts {
		s := mk()
		jobs = append(jobs, Job{Name: s.Name, Setup: s.Setup, Schedule: func() Schedule { return mk() }})
	}
	return jobs
}

// Options say how to play jobs.
type Options struct {
	Bin Binaries
	// Dir holds each cluster's etcd and working directories.
	Dir string
	// Parallel is how many clusters play at once, each one history at a
	// time.
	Parallel int
	// Logf, when set, receives every transcript line.
	Logf func(format string, args ...any)
	// Done, when set, is called after each history, one call at a time.
	Done func(*Report)
}

// Play plays every job and returns their reports in job order. Errors are
// harness failures; the reports say what safe-ipam did.
func Play(ctx context.Context, opt Options, jobs []Job) ([]*Report, error) {
	clusters, err := newClusters(ctx, opt)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range clusters {
			c.Close()
		}
	}()
	if done := opt.Done; done != nil {
		var mu sync.Mutex
		opt.Done = func(r *Report) {
			mu.Lock()
			defer mu.Unlock()
			done(r)
		}
	}
	reports := make([]*Report, len(jobs))
	next := make(chan int)
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for w, c := range clusters {
		wg.Go(func() { errs[w] = playOn(ctx, opt, c, jobs, reports, next) })
	}
	go func() {
		defer close(next)
		for i := range jobs {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	return reports, errors.Join(errs...)
}

// newClusters starts every cluster before any history plays: a cluster
// starting while another's etcd is stopped could take its port.
func newClusters(ctx context.Context, opt Options) ([]*Cluster, error) {
	var clusters []*Cluster
	for w := range max(1, opt.Parallel) {
		c, err := NewCluster(ctx, opt.Bin, filepath.Join(opt.Dir, fmt.Sprintf("cluster-%d", w)))
		if err != nil {
			for _, c := range clusters {
				c.Close()
			}
			return nil, err
		}
		clusters = append(clusters, c)
	}
	return clusters, nil
}

// playOn is one worker: its cluster, jobs one after another. On an error
// it keeps draining the queue so that the other workers finish.
func playOn(ctx context.Context, opt Options, c *Cluster, jobs []Job, reports []*Report, next <-chan int) error {
	p := &Player{Cluster: c, Logf: opt.Logf}
	var failed error
	for i := range next {
		if failed != nil {
			continue
		}
		j := jobs[i]
		rep, err := p.Play(ctx, j.Name, j.Seed, j.Setup, j.Schedule())
		reports[i] = rep
		if err != nil {
			failed = err
			continue
		}
		if opt.Done != nil {
			opt.Done(rep)
		}
	}
	return failed
}

// Summary adds up reports: the figures of `make chaos`'s last line.
type Summary struct {
	Histories, CrashPoints, Outages, Lost, Duplicated, Blocked int
	// Failed counts histories with a violation or a failed expectation.
	Failed int
}

// Summarize adds up reports; missing ones (a harness failure) are skipped.
func Summarize(reports ...[]*Report) Summary {
	var s Summary
	for _, rs := range reports {
		for _, r := range rs {
			if r == nil {
				continue
			}
			s.Histories++
			s.CrashPoints += r.Crashes
			s.Outages += r.Outages
			harms := r.Harms()
			s.Lost += harms[Lost]
			s.Duplicated += harms[Duplicated]
			s.Blocked += harms[Blocked]
			if !r.OK() {
				s.Failed++
			}
		}
	}
	return s
}

func (s Summary) String() string {
	return fmt.Sprintf("chaos: %d histories, %d crash points, %d outages, %d lost, %d duplicated, %d blocked",
		s.Histories, s.CrashPoints, s.Outages, s.Lost, s.Duplicated, s.Blocked)
}

// TempRoot is where clusters should live: /dev/shm when writable, since
// etcd fsyncs every write and that, not safe-ipam, would set the pace.
func TempRoot() string {
	if err := syscall.Access("/dev/shm", 2 /* W_OK */); err == nil {
		return "/dev/shm"
	}
	return os.TempDir()
}
