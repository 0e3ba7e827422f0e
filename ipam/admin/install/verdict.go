package install

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/metrics"
	"github.com/safe-ipam/safe-ipam/ipam/failnote"
)

// The watch keeps the node's verdict, which the readiness probe reads at
// its /readyz (safe-ipam doctor --ready-from) without asking anyone: a
// probe on every node every few seconds that read Calico's datastore was
// the heaviest load safe-ipam put on it, and a slow datastore turned
// every node NotReady at once.
//
// Ready means: the node's own files protect it (safe-ipam in front of
// calico-ipam, a config safe-ipam and Calico read alike, a delegate that
// answers), checked every CheckEvery with no request to anyone; the CNI
// path is not failing (package failnote: an ADD or DEL that fails for a
// reason of the node's leaves a note of its network, the network's next
// ADD that succeeds removes it; a note counts when it is newer than the
// last full check the store and datastore answered, which forgives one
// failure only, keeper.forgiven); and the last full check found the store
// and the datastore answering and no problem (Calico knows the node, the
// handle mode fits, gc keeps up). The full check runs at once on start,
// then every RemoteCheckEvery (or --full-check-every), each node at its
// own jittered time; at once too when the CNI path has failed since the
// last one (not while the store does not answer), or an ADD has
// succeeded again after a full check the store did not answer. One that
// the store or datastore does not answer is asked again after
// CheckEvery, then twice as long each time, up to maxRemoteBackoff.
//
// docs/operations.md states the delays this gives.

// CheckEvery is how often the watch checks the node's own files.
const CheckEvery = 30 * time.Second

// RemoteCheckEvery is how often, on average, the watch runs the full
// check, which reads the record store and Calico's datastore.
const RemoteCheckEvery = 10 * time.Minute

// remoteJitter spreads the nodes' full checks over ±20% of the period.
const remoteJitter = 0.2

// maxRemoteBackoff bounds the wait after full checks found the store or
// datastore not answering: each such check doubles the wait up to it. It
// bounds how long a node that no call proves well again stays NotReady
// after an outage.
const maxRemoteBackoff = 4 * time.Minute

// checkTimeout bounds one check: a store or datastore that does not
// answer makes doctor wait for its own timeouts.
const checkTimeout = 30 * time.Second

// readiness is the verdict the probe reads: the last local check's, the
// CNI path's, and the last full check's.
type readiness struct {
	mu                     sync.Mutex
	local, failing, remote error
}

// Ready is nil when the node is ready, else why not.
func (r *readiness) Ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range []error{r.local, r.failing, r.remote} {
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *readiness) setFailing(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing = err
}

// remoteOK says whether the last answered full check found the node
// protected.
func (r *readiness) remoteOK() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.remote == nil
}

func (r *readiness) set(remote bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if remote {
		r.remote = err
	} else {
		r.local = err
	}
}

// watchMetrics serves the watch's metrics and probes at addr until ctx
// ends, keeping the verdict in the background; each re-assertion is
// counted through the returned func. /healthz fails once the checks stop
// coming round (a wedged process); /readyz is the verdict.
func watchMetrics(ctx context.Context, addr admin.MetricsAddr, node Node, check NodeCheck, every time.Duration, log *slog.Logger) (observe func(Reassertion), stopped func(), err error) {
	reg := prometheus.NewRegistry()
	m := metrics.NewWatch(reg)
	beat := metrics.NewHeartbeat(3*CheckEvery + 2*checkTimeout)
	ready := &readiness{local: errors.New("not checked yet")}
	bound, wait, err := metrics.ListenProbes(ctx, addr.Addr, addr.ProbeSocket, reg, beat.Alive, ready.Ready)
	if err != nil {
		return nil, nil, err
	}
	log.Info("serving metrics", "addr", bound.String())
	k := &keeper{node: node, check: check, m: m, ready: ready, log: log}
	// A re-install checks again at once: the verdict then says what the
	// watch just put back, not what calico-node's installer had undone.
	recheck := make(chan struct{}, 1)
	go func() {
		s := newSchedule(time.Now(), every)
		for {
			k.run(ctx, false)
			if s.due(time.Now()) || k.fullCheckWanted() {
				m.FullChecks.Inc()
				k.fullCheck(ctx, s)
			}
			beat.Beat()
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.wait(time.Now())):
			case <-recheck:
				s.reinstalled(time.Now(), k.ready.remoteOK())
			}
		}
	}()
	return func(r Reassertion) {
		m.Reinstalls.Inc()
		m.Unprotected.Observe(r.Window().Seconds())
		select {
		case recheck <- struct{}{}:
		default: // one is pending already
		}
	}, wait, nil
}

// schedule says when the watch's next full check is due.
type schedule struct {
	next time.Time
	// backoff is the wait after an unanswered check, retry after one
	// that found the node not protected: apart, so that one kind of
	// failure never stretches the other's first wait.
	backoff, retry time.Duration
	every          time.Duration
}

// newSchedule has the first full check due at once.
func newSchedule(now time.Time, every time.Duration) *schedule {
	return &schedule{next: now, backoff: CheckEvery, retry: CheckEvery, every: every}
}

func (s *schedule) due(now time.Time) bool { return !now.Before(s.next) }

// checked sets the next full check after one that went as o and left the
// node's full verdict ok or not. A verdict of "not protected" is asked
// again soon, backing off up to the period: what it found may be the
// node's files caught in the middle of calico-node's installer, which the
// watch puts right within a second, or a fault the operator is mending,
// and the node must not stay NotReady for a whole period after either.
// The wait after an unanswered check starts at one local period and
// doubles: one slow answer at the start must not leave the node without
// a full check for twice its period. A check that could not run (the
// node's config read in the middle of a rewrite) asks no one: it runs
// again next round.
func (s *schedule) checked(now time.Time, o checkOutcome, ok bool) {
	switch {
	case o == checkAnswered && ok:
		s.next, s.backoff, s.retry = now.Add(jittered(s.every)), CheckEvery, CheckEvery
	case o == checkAnswered:
		s.next, s.backoff = now.Add(jittered(min(s.retry, s.every))), CheckEvery
		s.retry = min(2*s.retry, s.every)
	case o == checkUnanswered:
		s.next = now.Add(jittered(s.backoff))
		s.backoff = min(2*s.backoff, maxRemoteBackoff)
	}
}

// reinstalled makes a full check due at once when the last one found the
// node not protected: the watch has just put back what it may have seen
// undone.
func (s *schedule) reinstalled(now time.Time, ok bool) {
	if !ok {
		s.next = now
	}
}

// wait is the wait for the next round: one local period, or less when
// the next full check is due sooner (--full-check-every shorter than
// CheckEvery). A full check due already, or retried, waits a whole period.
func (s *schedule) wait(now time.Time) time.Duration {
	if u := s.next.Sub(now); u > 0 && u < CheckEvery {
		return u
	}
	return CheckEvery
}

// jittered is d, more or less remoteJitter of it at random.
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 - remoteJitter + 2*remoteJitter*rand.Float64()))
}

// keeper runs the checks and keeps their verdict and gauges.
type keeper struct {
	node  Node
	check NodeCheck
	m     *metrics.Watch
	ready *readiness
	log   *slog.Logger
	clock func() time.Time // nil: time.Now

	// answered is when the last full check that the store and datastore
	// answered started; tried, when the last full check started.
	answered, tried time.Time
	// unanswered: the last full check was not answered.
	unanswered bool
	// note is the CNI path's failure note the last check read, its time
	// no later than the check's (a clock stepped back).
	note *failnote.Note
	// recovered: a note the watch saw is gone, so an ADD succeeded.
	recovered bool
	// futureAt and seenAt: a note dated after the check that first read
	// it (a clock stepped back) counts from that check, not from each.
	futureAt, seenAt time.Time
	// forgiven is when a full check the store and datastore answered
	// followed a note: the failure was theirs, and they answer now. A
	// later note, while the first is not gone, is a failure the full
	// check does not see (a full disk, a pool exhausted, writes refused):
	// it is not forgiven again, until an ADD succeeds.
	forgiven time.Time
}

// noteStale is how long a failure note counts with no newer one: the
// runtime retries a pod that cannot start far more often, so a note older
// than this is one failure of the past.
const noteStale = 10 * time.Minute

// fullCheckWanted says whether the CNI path calls for a full check before
// it is due: it failed since the last full check began, and no full check
// has forgiven this failure yet nor found the store not answering (the
// schedule's back-off holds then); or an ADD succeeded again after a full
// check that was not answered.
func (k *keeper) fullCheckWanted() bool {
	if k.note != nil && k.note.At.After(k.tried) && k.now().Sub(k.note.At) < noteStale && k.forgiven.IsZero() && !k.unanswered {
		return true
	}
	return k.recovered && k.unanswered
}

// fullCheck runs a full check and schedules the next, counted from the
// end of this one: a check that waited out a slow datastore's timeout
// must not shorten the wait before the next.
func (k *keeper) fullCheck(ctx context.Context, s *schedule) {
	o := k.run(ctx, true)
	s.checked(k.now(), o, k.ready.remoteOK())
}

func (k *keeper) now() time.Time {
	if k.clock != nil {
		return k.clock()
	}
	return time.Now()
}

// checkOutcome is how a check went, for the watch's schedule.
type checkOutcome int

const (
	checkAnswered   checkOutcome = iota // a verdict, every source answered
	checkUnanswered                     // the store or Calico's datastore did not answer: back off
	checkFailed                         // the check could not run: try again next round
)

// run checks the node, locally or fully, and says how it went (a local
// one is always answered, or failed).
func (k *keeper) run(ctx context.Context, remote bool) checkOutcome {
	start := k.now()
	if remote {
		k.tried, k.recovered = start, false
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	v, err := Verdict{}, errors.New("no check wired in")
	if k.check != nil {
		v, err = k.check(ctx, k.node, remote)
	}
	answered := err == nil && !v.Unanswered
	switch {
	case err != nil:
		k.log.Warn("checking the node failed", "full", remote, "error", err)
		k.ready.set(false, err)
	case v.Unanswered:
		k.log.Warn("the record store or Calico's datastore did not answer", "problems", v.Problems)
		k.ready.set(true, errors.New("the record store or Calico's datastore does not answer: "+strings.Join(v.Problems, "; ")))
	case v.Protected:
		k.ready.set(remote, nil)
	default:
		k.ready.set(remote, errors.New("not protected: "+strings.Join(v.Problems, "; ")))
	}
	if err == nil {
		k.judgeNote(v.Failing, remote, answered, start)
	}
	if remote && answered {
		k.m.Records.Reset()
		k.m.Quarantines.Reset()
		for _, s := range v.Stores {
			k.m.Records.WithLabelValues(s.Network).Add(float64(s.Records))
			k.m.Quarantines.WithLabelValues(s.Network).Add(float64(s.Quarantines))
		}
	}
	if k.ready.Ready() == nil {
		k.m.Protected.Set(1)
	} else {
		k.m.Protected.Set(0)
	}
	k.m.LastCheck.SetToCurrentTime()
	switch {
	case err != nil:
		return checkFailed
	case !answered:
		return checkUnanswered
	}
	return checkAnswered
}

// judgeNote keeps what the CNI path says in the verdict: a failure since
// the last full check that the store and datastore answered makes the
// node not ready until an ADD succeeds, or such a check follows it (once:
// see keeper.forgiven), or noteStale passes with no newer failure.
func (k *keeper) judgeNote(note *failnote.Note, remote, answered bool, start time.Time) {
	if note != nil && note.At.After(start) {
		if !note.At.Equal(k.futureAt) {
			k.futureAt, k.seenAt = note.At, start
		}
		n := *note
		n.At = k.seenAt
		note = &n
	}
	if remote {
		k.unanswered = !answered
		if answered {
			k.answered = start
			if note != nil && k.forgiven.IsZero() {
				k.forgiven = start
			}
		}
	}
	if note == nil {
		k.recovered = k.recovered || k.note != nil
		k.forgiven = time.Time{}
	}
	k.note = note
	failing := note != nil && start.Sub(note.At) < noteStale &&
		(note.At.After(k.answered) || (!k.forgiven.IsZero() && note.At.After(k.forgiven)))
	if failing {
		k.ready.setFailing(errors.New("the CNI path is failing: " + note.String()))
		return
	}
	k.ready.setFailing(nil)
}
