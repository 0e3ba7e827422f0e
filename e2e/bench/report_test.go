package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

func sampleResults() *Results {
	res := &Results{Ratios: map[string]float64{},
		Latency: []Latency{
			{Config: Alone, Op: "ADD", P50: 10}, {Config: Alone, Op: "DEL", P50: 9},
			{Config: File, Op: "ADD", P50: 13}, {Config: File, Op: "DEL", P50: 11},
			{Config: Etcd, Op: "ADD", P50: 15}, {Config: Etcd, Op: "DEL", P50: 14},
			{Config: KDDFile, Op: "ADD", P50: 11}, {Config: KDDFile, Op: "DEL", P50: 9.9},
			{Config: KDDClaims, Op: "ADD", P50: 12}, {Config: KDDClaims, Op: "DEL", P50: 12.6},
		},
		Exec:       ExecCost{SafeIPAMVersionP50: 2.4, HostLocalVersionP50: 2, Ratio: 1.2},
		RoundTrips: RoundTrips{SafeIPAMAdd: 2, SafeIPAMDel: 2},
	}
	for _, c := range []struct {
		config       string
		one, e, many float64
	}{{Alone, 50, 80, 100}, {File, 48, 76, 93}, {Etcd, 47, 78, 96}} {
		res.Churn = append(res.Churn, Churn{Config: c.config, Workers: 1, OpsPerSec: c.one},
			Churn{Config: c.config, Workers: 8, OpsPerSec: c.e}, Churn{Config: c.config, Workers: 32, OpsPerSec: c.many})
	}
	for _, l := range res.Latency {
		if l.Config != Alone {
			res.Ratios[l.Config+" "+l.Op+" p50"] = l.P50 / res.latency(Alone, l.Op).P50
		}
	}
	res.derive()
	return res
}

// The last line keeps its old fields first, so scripts that read it go on
// working, and appends the added latency over the floor and the churn
// ratio, then the Kubernetes datastore's ratios, with and without claims.
func TestLineKeepsItsFieldsAndAppendsTheNewOnes(t *testing.T) {
	want := "bench: add x1.30 del x1.22 (file store), add x1.50 del x1.56 (etcd store), exec x1.20 vs host-local, etcd round trips add 2 del 2, churn32 93/s 0 errors" +
		", added/floor file add 1.50 del 1.00 etcd add 2.50 del 2.50, churn vs alone min x0.93" +
		", kdd file add x1.10 del x1.10, kdd claims add x1.20 del x1.40"
	if got := sampleResults().Line(); got != want {
		t.Errorf("Line() =\n%s\nwant\n%s", got, want)
	}
}

func TestTableShowsTargetsAndBreakdown(t *testing.T) {
	res := sampleResults()
	res.Breakdown = []Breakdown{{Config: File, Op: "ADD", N: 3, ExecInit: 2.5, Total: 13}}
	var b strings.Builder
	res.WriteTable(&b)
	for _, want := range []string{"target x1.25", "1.50 and 1.00 floors of 2.00 ms (target 1.50)", "where safe-ipam's time goes", "x0.93 file store, x0.94 etcd store (target x0.90)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestPhasesSplitACall(t *testing.T) {
	ms := func(n float64) int64 { return int64(n * float64(time.Millisecond)) }
	ct := callTrace{start: 0, end: ms(20), logOpen: ms(0.1), logNanos: ms(0.3), marks: map[string][]int64{
		logging.MarkMain: {ms(3)}, logging.MarkResolved: {ms(3.5)}, logging.MarkOpened: {ms(4)},
		logging.MarkDelegateStart: {ms(5), ms(9)}, logging.MarkDelegateEnd: {ms(8), ms(17)}, logging.MarkRan: {ms(18)},
	}}
	// exec+init, checks (less the log's open), store open, write 1, every
	// delegate exec, write 2 (less log writes), logging, exit, total.
	want := []float64{3, 0.4, 0.5, 1, 12, 0.8, 0.3, 2, 20}
	for i, got := range ct.phases() {
		if d := got.Seconds()*1000 - want[i]; d > 1e-9 || d < -1e-9 {
			t.Errorf("phase %d = %v, want %v ms", i, got, want[i])
		}
	}
}
