package install

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/safe-ipam/safe-ipam/ipam/admin/metrics"
)

// The verdict the readiness probe reads: the node's own files, and the
// last full check the store and datastore answered. A datastore that does
// not answer (slow, down) leaves the verdict as it was: it never turns
// every node NotReady at once (issue 32).
func TestVerdictOutlivesAnUnansweredDatastore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []Verdict // each a check: remote when Stores is set or Unanswered
		ready bool
	}{
		{"protected", []Verdict{{Protected: true}, {Protected: true, Stores: []StoreCount{{Network: "n"}}}}, true},
		{"the datastore does not answer", []Verdict{{Protected: true}, {Unanswered: true, Problems: []string{"timeout"}}}, true},
		{"the datastore answers a problem", []Verdict{{Protected: true}, {Problems: []string{"Calico has no Node"}, Stores: []StoreCount{{Network: "n"}}}}, false},
		{"a problem, then no answer", []Verdict{{Protected: true}, {Problems: []string{"no Node"}, Stores: []StoreCount{{Network: "n"}}}, {Unanswered: true}}, false},
		{"the node's files are wrong", []Verdict{{Problems: []string{"calico-ipam is Calico's"}}, {Unanswered: true}}, false},
		{"not checked yet", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready := &readiness{local: errors.New("not checked yet")}
			k := &keeper{m: metrics.NewWatch(prometheus.NewRegistry()), ready: ready, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			for _, v := range tc.steps {
				k.check = func(context.Context, Node, bool) (Verdict, error) { return v, nil }
				k.run(context.Background(), v.Unanswered || v.Stores != nil)
			}
			if err := ready.Ready(); (err == nil) != tc.ready {
				t.Errorf("Ready() = %v; want ready %v", err, tc.ready)
			}
		})
	}
}

// When the watch's next full check is due. A full check that found the
// node not protected is asked again soon, and at once after a re-install:
// one that read the node's files while calico-node's installer had them
// undone must not leave the node NotReady for a whole period (CI caught
// it: the first full check raced the first calico-node restart).
func TestScheduleOfFullChecks(t *testing.T) {
	const every = 10 * time.Minute
	at := func(d time.Duration) time.Time { return time.Unix(0, 0).Add(d) }
	type step struct {
		outcome     checkOutcome
		ok          bool
		reinstalled bool // then a re-install, the full verdict ok as above
	}
	for _, tc := range []struct {
		name     string
		steps    []step
		min, max time.Duration // the next full check, after the last step at 0
	}{
		{"protected", []step{{outcome: checkAnswered, ok: true}}, every * 8 / 10, every * 12 / 10},
		{"not protected", []step{{outcome: checkAnswered}}, CheckEvery * 8 / 10, CheckEvery * 12 / 10},
		{"not protected, twice", []step{{outcome: checkAnswered}, {outcome: checkAnswered}}, 2 * CheckEvery * 8 / 10, 2 * CheckEvery * 12 / 10},
		{"not protected many times: the period at most", []step{{}, {}, {}, {}, {}, {}, {}, {}}, every * 8 / 10, every * 12 / 10},
		{"not protected, then re-installed", []step{{outcome: checkAnswered, reinstalled: true}}, 0, 0},
		{"protected, then re-installed", []step{{outcome: checkAnswered, ok: true, reinstalled: true}}, every * 8 / 10, every * 12 / 10},
		{"unanswered", []step{{outcome: checkUnanswered, ok: true}}, CheckEvery * 8 / 10, CheckEvery * 12 / 10},
		{"unanswered many times", []step{{outcome: checkUnanswered, ok: true}, {outcome: checkUnanswered, ok: true}, {outcome: checkUnanswered, ok: true}, {outcome: checkUnanswered, ok: true}, {outcome: checkUnanswered, ok: true}, {outcome: checkUnanswered, ok: true}, {outcome: checkUnanswered, ok: true}, {outcome: checkUnanswered, ok: true}}, maxRemoteBackoff * 8 / 10, maxRemoteBackoff * 12 / 10},
		{"failed to run", []step{{outcome: checkFailed}}, 0, 0},
		// One kind of failure does not stretch the other's first wait.
		{"not protected many times, then unanswered", []step{{}, {}, {}, {}, {}, {}, {}, {}, {outcome: checkUnanswered}}, CheckEvery * 8 / 10, CheckEvery * 12 / 10},
		{"unanswered twice, then not protected", []step{{outcome: checkUnanswered}, {outcome: checkUnanswered}, {outcome: checkAnswered}}, CheckEvery * 8 / 10, CheckEvery * 12 / 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSchedule(at(0), every)
			for _, st := range tc.steps {
				s.checked(at(0), st.outcome, st.ok)
				if st.reinstalled {
					s.reinstalled(at(0), st.ok)
				}
			}
			if got := s.next.Sub(at(0)); got < tc.min || got > tc.max {
				t.Errorf("next full check in %v; want %v to %v", got, tc.min, tc.max)
			}
		})
	}
}

// The wait before the next full check counts from the end of the last:
// one that waited 30 s for a datastore that did not answer is retried
// a local period after it gave up, not right away.
func TestFullCheckWaitsFromItsEnd(t *testing.T) {
	start := time.Unix(0, 0)
	now := start
	k := &keeper{m: metrics.NewWatch(prometheus.NewRegistry()), ready: &readiness{}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		clock: func() time.Time { return now },
		check: func(context.Context, Node, bool) (Verdict, error) {
			now = now.Add(checkTimeout) // the datastore's timeout ran out
			return Verdict{Unanswered: true}, nil
		}}
	s := newSchedule(start, RemoteCheckEvery)
	k.fullCheck(context.Background(), s)
	if min := start.Add(checkTimeout + CheckEvery*8/10); s.next.Before(min) {
		t.Errorf("next full check %v after the start; want at least %v (the check's %v, then a local period less its jitter)", s.next.Sub(start), min.Sub(start), checkTimeout)
	}
}
