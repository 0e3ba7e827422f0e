package bench

import (
	"fmt"
	"io"
)

// FloorCost compares, for one store and op, safe-ipam with the design
// floor (e2e/cmd/ipam-floor: the delegate's exec and the store's two
// durable writes per call, nothing else) measured in the same run. Added
// is a p50 minus the delegate alone's; floors are bare execs (host-local's
// VERSION p50), the unit of the targets.
type FloorCost struct {
	Store               string  `json:"store"` // the safe-ipam configuration
	Op                  string  `json:"op"`
	FloorAddedMs        float64 `json:"floorAddedMs"`
	FloorAddedFloors    float64 `json:"floorAddedFloors"`
	SafeIPAMAddedMs     float64 `json:"safeIpamAddedMs"`
	SafeIPAMAddedFloors float64 `json:"safeIpamAddedFloors"`
	// SafeIPAMVsFloor is safe-ipam's added over the design floor's: how
	// far safe-ipam is from the least this design can cost (1 is there).
	SafeIPAMVsFloor float64 `json:"safeIpamAddedVsFloorAdded"`
}

// The Ratios keys of the design floor's VERSION and churn.
const (
	ratioFloorVersion    = "design floor VERSION vs host-local"
	ratioVersionVsFloor  = "safe-ipam VERSION vs design floor"
	ratioFloorChurnAlone = " churn vs alone min"        // after a floor config
	ratioChurnVsFloor    = " churn vs design floor min" // after a safe-ipam config
)

// deriveFloor fills DesignFloor and the floor's Ratios, if the run
// measured the design floor.
func (res *Results) deriveFloor() {
	bare := res.Exec.HostLocalVersionP50
	if bare == 0 || res.latency(FloorFile, "ADD").P50 == 0 {
		return
	}
	res.DesignFloor = nil
	for _, c := range []string{File, Etcd} {
		for _, op := range []string{"ADD", "DEL"} {
			alone := res.latency(Alone, op).P50
			floor, safe := res.latency(floorOf(c), op).P50-alone, res.latency(c, op).P50-alone
			fc := FloorCost{Store: c, Op: op, FloorAddedMs: floor, FloorAddedFloors: floor / bare, SafeIPAMAddedMs: safe, SafeIPAMAddedFloors: safe / bare}
			if floor > 0 {
				fc.SafeIPAMVsFloor = safe / floor
			}
			res.DesignFloor = append(res.DesignFloor, fc)
		}
		res.Ratios[floorOf(c)+ratioFloorChurnAlone] = res.churnVs(floorOf(c), Alone)
		res.Ratios[c+ratioChurnVsFloor] = res.churnVs(c, floorOf(c))
	}
	if f := res.Exec.FloorVersionP50; f > 0 {
		res.Ratios[ratioFloorVersion] = f / bare
		res.Ratios[ratioVersionVsFloor] = res.Exec.SafeIPAMVersionP50 / f
	}
}

// churnVs is config's lowest churn throughput over base's at the same
// number of workers; 0 if either was not measured.
func (res *Results) churnVs(config, base string) float64 {
	lowest := 0.0
	for _, c := range res.Churn {
		b := res.churn(base, c.Workers).OpsPerSec
		if c.Config != config || b == 0 {
			continue
		}
		if r := c.OpsPerSec / b; lowest == 0 || r < lowest {
			lowest = r
		}
	}
	return lowest
}

func (res *Results) writeDesignFloor(w io.Writer) {
	if len(res.DesignFloor) == 0 {
		return
	}
	fmt.Fprintf(w, "\ndesign floor (e2e/cmd/ipam-floor: the delegate's exec and the store's two durable writes, nothing else), added p50 over the delegate alone:\n")
	for _, f := range res.DesignFloor {
		fmt.Fprintf(w, "  %s %s: design floor %.2f ms = %.2f floors; safe-ipam %.2f ms = %.2f floors, x%.2f the design floor's\n",
			f.Store, f.Op, f.FloorAddedMs, f.FloorAddedFloors, f.SafeIPAMAddedMs, f.SafeIPAMAddedFloors, f.SafeIPAMVsFloor)
	}
	fmt.Fprintf(w, "  VERSION: design floor %.2f ms = x%.2f host-local; safe-ipam x%.2f the design floor's\n",
		res.Exec.FloorVersionP50, res.Ratios[ratioFloorVersion], res.Ratios[ratioVersionVsFloor])
	fmt.Fprintf(w, "  churn, lowest of 1, 8 and 32 workers: design floor x%.2f (file) x%.2f (etcd) the delegate alone; safe-ipam x%.2f (file) x%.2f (etcd) the design floor\n",
		res.Ratios[FloorFile+ratioFloorChurnAlone], res.Ratios[FloorEtcd+ratioFloorChurnAlone], res.Ratios[File+ratioChurnVsFloor], res.Ratios[Etcd+ratioChurnVsFloor])
}
