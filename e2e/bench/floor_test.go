package bench

import (
	"math"
	"strings"
	"testing"
)

// withDesignFloor is sampleResults with the design floor measured: it adds
// 1.5 ms (file) and 3 ms (etcd) to the delegate alone, against safe-ipam's
// 3 and 2 ms (file) and 5 ms (etcd), with a bare exec of 2 ms.
func withDesignFloor() *Results {
	res := sampleResults()
	res.Latency = append(res.Latency,
		Latency{Config: FloorFile, Op: "ADD", P50: 11.5}, Latency{Config: FloorFile, Op: "DEL", P50: 10.5},
		Latency{Config: FloorEtcd, Op: "ADD", P50: 13}, Latency{Config: FloorEtcd, Op: "DEL", P50: 12})
	res.Exec.FloorVersionP50 = 2.2
	for _, c := range []struct {
		config       string
		one, e, many float64
	}{{FloorFile, 49, 80, 100}, {FloorEtcd, 48, 79, 98}} {
		res.Churn = append(res.Churn, Churn{Config: c.config, Workers: 1, OpsPerSec: c.one},
			Churn{Config: c.config, Workers: 8, OpsPerSec: c.e}, Churn{Config: c.config, Workers: 32, OpsPerSec: c.many})
	}
	res.derive()
	return res
}

func TestDesignFloorRows(t *testing.T) {
	res := withDesignFloor()
	want := []FloorCost{
		{Store: File, Op: "ADD", FloorAddedMs: 1.5, FloorAddedFloors: 0.75, SafeIPAMAddedMs: 3, SafeIPAMAddedFloors: 1.5, SafeIPAMVsFloor: 2},
		{Store: File, Op: "DEL", FloorAddedMs: 1.5, FloorAddedFloors: 0.75, SafeIPAMAddedMs: 2, SafeIPAMAddedFloors: 1, SafeIPAMVsFloor: 4.0 / 3},
		{Store: Etcd, Op: "ADD", FloorAddedMs: 3, FloorAddedFloors: 1.5, SafeIPAMAddedMs: 5, SafeIPAMAddedFloors: 2.5, SafeIPAMVsFloor: 5.0 / 3},
		{Store: Etcd, Op: "DEL", FloorAddedMs: 3, FloorAddedFloors: 1.5, SafeIPAMAddedMs: 5, SafeIPAMAddedFloors: 2.5, SafeIPAMVsFloor: 5.0 / 3},
	}
	if len(res.DesignFloor) != len(want) {
		t.Fatalf("DesignFloor = %+v, want %d rows", res.DesignFloor, len(want))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for i, w := range want {
		g := res.DesignFloor[i]
		if g.Store != w.Store || g.Op != w.Op || !near(g.FloorAddedMs, w.FloorAddedMs) || !near(g.FloorAddedFloors, w.FloorAddedFloors) ||
			!near(g.SafeIPAMAddedMs, w.SafeIPAMAddedMs) || !near(g.SafeIPAMAddedFloors, w.SafeIPAMAddedFloors) || !near(g.SafeIPAMVsFloor, w.SafeIPAMVsFloor) {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}
	ratios := []struct {
		key  string
		want float64
	}{
		{ratioFloorVersion, 1.1},
		{ratioVersionVsFloor, 2.4 / 2.2},
		{FloorFile + ratioFloorChurnAlone, 0.98},      // 49/50 at 1 worker
		{File + ratioChurnVsFloor, 0.93},              // 93/100 at 32 workers
		{Etcd + ratioChurnVsFloor, 47.0 / 48},         // at 1 worker
		{FloorEtcd + ratioFloorChurnAlone, 48.0 / 50}, // at 1 worker
	}
	for _, r := range ratios {
		if got := res.Ratios[r.key]; !near(got, r.want) {
			t.Errorf("Ratios[%q] = %v, want %v", r.key, got, r.want)
		}
	}
	var b strings.Builder
	res.WriteTable(&b)
	for _, want := range []string{
		"safe-ipam + file store ADD: design floor 1.50 ms = 0.75 floors; safe-ipam 3.00 ms = 1.50 floors, x2.00 the design floor's",
		"safe-ipam + etcd store DEL: design floor 3.00 ms = 1.50 floors; safe-ipam 5.00 ms = 2.50 floors, x1.67 the design floor's",
		"VERSION: design floor 2.20 ms = x1.10 host-local; safe-ipam x1.09 the design floor's",
		"design floor x0.98 (file) x0.96 (etcd) the delegate alone; safe-ipam x0.93 (file) x0.98 (etcd) the design floor",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// A run without the design floor (or results read from before it) has
// no floor rows, and no ratio that is not a number.
func TestNoDesignFloorNoRows(t *testing.T) {
	res := sampleResults()
	if len(res.DesignFloor) != 0 {
		t.Errorf("DesignFloor = %+v, want none", res.DesignFloor)
	}
	for k, v := range res.Ratios {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("Ratios[%q] = %v", k, v)
		}
	}
	var b strings.Builder
	res.WriteTable(&b)
	if strings.Contains(b.String(), "design floor") {
		t.Errorf("table shows a design floor it did not measure:\n%s", b.String())
	}
}
