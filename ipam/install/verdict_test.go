package install

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/safe-ipam/safe-ipam/ipam/metrics"
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
