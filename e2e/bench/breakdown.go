package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// Breakdown is where safe-ipam's time goes in one configuration's ADD or
// DEL: the p50 of each phase in milliseconds, from a traced run apart
// from the latency samples (tracing writes a file per call).
type Breakdown struct {
	Config string `json:"config"`
	Op     string `json:"op"`
	N      int    `json:"n"`
	// ExecInit runs from the runtime's call to safe-ipam's main: libcni,
	// fork and exec, the Go runtime and package initialisation.
	ExecInit float64 `json:"execInitMs"`
	// Checks reads and checks the config, CNI_ARGS and the attachment and
	// finds the delegate (its versions from the cache).
	Checks float64 `json:"configChecksMs"`
	// StoreOpen names the node, negotiates the version and opens the
	// store: with etcd, the connection.
	StoreOpen float64 `json:"storeOpenMs"`
	// Write1 is the store write before the delegate: ADD's pending
	// record, DEL's releasing mark.
	Write1   float64 `json:"storeWrite1Ms"`
	Delegate float64 `json:"delegateMs"`
	// Write2 is the store write after it: ADD's commit, DEL's forget.
	Write2 float64 `json:"storeWrite2Ms"`
	// Logging opens the log file and writes to it.
	Logging float64 `json:"loggingMs"`
	// Exit runs from the verb's end to the runtime having the answer:
	// closing the store, printing the result, exit, libcni's cache.
	Exit  float64 `json:"exitMs"`
	Total float64 `json:"totalMs"`
}

// callTrace is one traced call: the runtime's clock around it and what
// safe-ipam wrote to the trace.
type callTrace struct {
	start, end int64
	marks      map[string][]int64
	logNanos   int64
	logOpen    int64
}

// measureBreakdown runs traced ADD and DEL pairs of both stores.
func (r *rig) measureBreakdown(ctx context.Context, res *Results) error {
	defer os.Unsetenv(logging.TraceEnv)
	for _, c := range []string{File, Etcd} {
		list, err := r.conflist(c)
		if err != nil {
			return err
		}
		calls := map[string][]callTrace{}
		for i := 0; i < r.opts.TraceSamples; i++ {
			p := pod{containerID: fmt.Sprintf("trace-%s-%d", confName(c), i), name: fmt.Sprintf("web-%d", i%4)}
			for _, op := range []string{"ADD", "DEL"} {
				ct, err := r.tracedCall(ctx, op, list, p, fmt.Sprintf("trace-%s-%s-%d", confName(c), op, i))
				if err != nil {
					return err
				}
				calls[op] = append(calls[op], ct)
			}
		}
		for _, op := range []string{"ADD", "DEL"} {
			res.Breakdown = append(res.Breakdown, breakdownOf(c, op, calls[op]))
		}
	}
	return nil
}

func (r *rig) tracedCall(ctx context.Context, op string, list *libcni.NetworkConfigList, p pod, name string) (callTrace, error) {
	path := filepath.Join(r.dir, name)
	// libcni passes the runtime's environment to the plugin.
	if err := os.Setenv(logging.TraceEnv, path); err != nil {
		return callTrace{}, err
	}
	ct := callTrace{start: time.Now().UnixNano()}
	if err := r.do(ctx, op, list, p); err != nil {
		return ct, err
	}
	ct.end = time.Now().UnixNano()
	return ct, readTrace(path, &ct)
}

// readTrace reads the lines safe-ipam appended: its phase marks and what
// logging cost.
func readTrace(path string, ct *callTrace) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("trace of a call: %w", err)
	}
	defer f.Close()
	ct.marks = map[string][]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			Marks      []logging.Mark `json:"marks"`
			OpenNanos  int64          `json:"logOpenNanos"`
			WriteNanos int64          `json:"logWriteNanos"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("trace %s: %w", path, err)
		}
		for _, m := range line.Marks {
			ct.marks[m.Name] = append(ct.marks[m.Name], m.At)
		}
		ct.logOpen += line.OpenNanos
		ct.logNanos += line.OpenNanos + line.WriteNanos
	}
	if len(ct.marks[logging.MarkRan]) != 1 {
		return fmt.Errorf("trace %s: want one call, got %d", path, len(ct.marks[logging.MarkRan]))
	}
	return sc.Err()
}

// phases splits one call; see Breakdown.
func (ct callTrace) phases() [9]time.Duration {
	first := func(name string) int64 { return ct.marks[name][0] }
	last := func(name string) int64 { return ct.marks[name][len(ct.marks[name])-1] }
	d := func(from, to int64) time.Duration { return time.Duration(to - from) }
	logWrite := ct.logNanos - ct.logOpen
	return [9]time.Duration{
		d(ct.start, first(logging.MarkMain)),
		d(first(logging.MarkMain), first(logging.MarkResolved)) - time.Duration(ct.logOpen),
		d(first(logging.MarkResolved), first(logging.MarkOpened)),
		d(first(logging.MarkOpened), first(logging.MarkDelegateStart)),
		d(first(logging.MarkDelegateStart), last(logging.MarkDelegateEnd)),
		d(last(logging.MarkDelegateEnd), first(logging.MarkRan)) - time.Duration(logWrite),
		time.Duration(ct.logNanos),
		d(first(logging.MarkRan), ct.end),
		d(ct.start, ct.end),
	}
}

func breakdownOf(config, op string, calls []callTrace) Breakdown {
	var per [9][]time.Duration
	for _, ct := range calls {
		for i, p := range ct.phases() {
			per[i] = append(per[i], p)
		}
	}
	var p50 [9]float64
	for i := range per {
		p50[i], _, _ = percentiles(per[i])
	}
	return Breakdown{Config: config, Op: op, N: len(calls), ExecInit: p50[0], Checks: p50[1], StoreOpen: p50[2], Write1: p50[3],
		Delegate: p50[4], Write2: p50[5], Logging: p50[6], Exit: p50[7], Total: p50[8]}
}
