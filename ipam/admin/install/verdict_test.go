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
	"github.com/safe-ipam/safe-ipam/ipam/failnote"
)

// The verdict the readiness probe reads: the node's own files, the CNI
// path's failure notes and the last full check. Issue 44, item 1: a store
// or datastore that does not answer, or a CNI path that fails, makes the
// node not ready (it was "the last verdict stands", and every ADD failed
// on a Ready node); a call that succeeds, or a full check answered after
// the failure, makes it ready again.
func TestVerdictSaysWhatPodsMeet(t *testing.T) {
	t0 := time.Unix(1000, 0)
	failed := func(at int) *failnote.Note {
		return &failnote.Note{At: t0.Add(time.Duration(at) * time.Second), Verb: "ADD", Network: "n", Code: 11, Msg: "etcd not reachable"}
	}
	answered := func(ok bool) Verdict {
		if ok {
			return Verdict{Protected: true, Stores: []StoreCount{{Network: "n"}}}
		}
		return Verdict{Problems: []string{"Calico has no Node"}, Stores: []StoreCount{{Network: "n"}}}
	}
	for _, tc := range []struct {
		name  string
		steps []Verdict // each a check, one second after the last: remote when Stores is set or Unanswered
		ready bool
		// fullCheck: the CNI path calls for a full check before it is due.
		fullCheck bool
	}{
		{"protected", []Verdict{{Protected: true}, answered(true)}, true, false},
		{"the datastore does not answer", []Verdict{{Protected: true}, {Unanswered: true, Problems: []string{"timeout"}}}, false, false},
		{"the datastore answers a problem", []Verdict{{Protected: true}, answered(false)}, false, false},
		{"a problem, then no answer", []Verdict{{Protected: true}, answered(false), {Unanswered: true}}, false, false},
		{"the node's files are wrong", []Verdict{{Problems: []string{"calico-ipam is Calico's"}}, {Unanswered: true}}, false, false},
		{"not checked yet", nil, false, false},
		{"an ADD failed after the last full check", []Verdict{answered(true), {Protected: true, Failing: failed(2)}}, false, true},
		{"a full check answered after the failure", []Verdict{answered(true), {Protected: true, Failing: failed(2)}, {Protected: true, Stores: []StoreCount{{Network: "n"}}, Failing: failed(2)}}, true, false},
		{"the failure before the last full check", []Verdict{{Protected: true, Failing: failed(0)}, {Protected: true, Stores: []StoreCount{{Network: "n"}}, Failing: failed(0)}, {Protected: true, Failing: failed(0)}}, true, false},
		{"the full check after the failure not answered", []Verdict{answered(true), {Protected: true, Failing: failed(2)}, {Unanswered: true, Failing: failed(2)}}, false, false},
		{"then a call succeeded", []Verdict{answered(true), {Protected: true, Failing: failed(2)}, {Unanswered: true, Failing: failed(2)}, {Protected: true}}, false, true},
		{"then the full check it called for", []Verdict{answered(true), {Protected: true, Failing: failed(2)}, {Unanswered: true, Failing: failed(2)}, {Protected: true}, answered(true)}, true, false},
		{"a failure the full check does not see", []Verdict{answered(true), {Protected: true, Failing: failed(2)}, {Protected: true, Stores: []StoreCount{{Network: "n"}}, Failing: failed(2)}, {Protected: true, Failing: failed(4)}, {Protected: true, Stores: []StoreCount{{Network: "n"}}, Failing: failed(4)}}, false, false},
		{"then an ADD succeeded", []Verdict{answered(true), {Protected: true, Failing: failed(2)}, {Protected: true, Stores: []StoreCount{{Network: "n"}}, Failing: failed(2)}, {Protected: true, Failing: failed(4)}, {Protected: true}}, true, false},
		{"a note from a clock stepped back", []Verdict{answered(true), {Protected: true, Failing: failed(3600)}, {Protected: true, Stores: []StoreCount{{Network: "n"}}, Failing: failed(3600)}}, true, false},
		{"a note from a clock stepped back, read again and again", append([]Verdict{answered(true)}, repeat(Verdict{Protected: true, Failing: failed(7200)}, 700)...), true, false},
		{"a note of long ago", []Verdict{{Protected: true, Failing: failed(-3600)}}, true, false},
		{"the outage goes on: no full check each round", []Verdict{answered(true), {Protected: true, Failing: failed(2)}, {Unanswered: true, Failing: failed(2)}, {Protected: true, Failing: failed(4)}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready := &readiness{local: errors.New("not checked yet")}
			now := t0
			k := &keeper{m: metrics.NewWatch(prometheus.NewRegistry()), ready: ready, log: slog.New(slog.NewTextHandler(io.Discard, nil)), clock: func() time.Time { return now }}
			for _, v := range tc.steps {
				now = now.Add(time.Second)
				k.check = func(context.Context, Node, bool) (Verdict, error) { return v, nil }
				k.run(context.Background(), v.Unanswered || v.Stores != nil)
			}
			if err := ready.Ready(); (err == nil) != tc.ready {
				t.Errorf("Ready() = %v; want ready %v", err, tc.ready)
			}
			if got := k.fullCheckWanted(); got != tc.fullCheck {
				t.Errorf("fullCheckWanted() = %v; want %v", got, tc.fullCheck)
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

func repeat(v Verdict, n int) []Verdict {
	out := make([]Verdict, n)
	for i := range out {
		out[i] = v
	}
	return out
}
