package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
)

// measureLatency runs ADD then DEL of fresh pods, rotating through the
// configurations and the design floors so that drift in the machine hits
// all alike.
func (r *rig) measureLatency(ctx context.Context, res *Results) error {
	samples := map[string]map[string][]time.Duration{}
	for _, c := range withFloors() {
		samples[c] = map[string][]time.Duration{}
	}
	for i := 0; i < r.opts.Samples; i++ {
		for _, c := range withFloors() {
			list, err := r.conflist(c)
			if err != nil {
				return err
			}
			p := pod{containerID: fmt.Sprintf("lat-%s-%d", confName(c), i), name: fmt.Sprintf("web-%d", i%4)}
			for _, op := range []string{"ADD", "DEL"} {
				start := time.Now()
				if err := r.do(ctx, op, list, p); err != nil {
					return err
				}
				samples[c][op] = append(samples[c][op], time.Since(start))
			}
		}
	}
	for _, c := range withFloors() {
		for _, op := range []string{"ADD", "DEL"} {
			p50, p95, p99 := percentiles(samples[c][op])
			res.Latency = append(res.Latency, Latency{Config: c, Op: op, P50: p50, P95: p95, P99: p99, N: len(samples[c][op])})
		}
	}
	for _, l := range res.Latency {
		if l.Config == Alone {
			continue
		}
		base := res.latency(Alone, l.Op)
		res.Ratios[fmt.Sprintf("%s %s p50", l.Config, l.Op)] = l.P50 / base.P50
	}
	return nil
}

func (res *Results) latency(config, op string) Latency {
	for _, l := range res.Latency {
		if l.Config == config && l.Op == op {
			return l
		}
	}
	return Latency{}
}

// ExecCost compares the bare cost of starting a Go CNI plugin.
type ExecCost struct {
	SafeIPAMVersionP50  float64 `json:"safeIpamVersionP50ms"`
	HostLocalVersionP50 float64 `json:"hostLocalVersionP50ms"`
	Ratio               float64 `json:"ratio"`
	// FloorVersionP50 is the design floor's (e2e/cmd/ipam-floor built
	// as the lean CNI binary is, without the etcd client): a minimal Go
	// plugin.
	FloorVersionP50 float64 `json:"floorVersionP50ms"`
	// EtcdBuildVersionP50 is safe-ipam-etcd's, the CNI binary of nodes
	// whose records are in etcd: it links the etcd client.
	EtcdBuildVersionP50 float64 `json:"etcdBuildVersionP50ms"`
}

func (r *rig) measureExec(ctx context.Context, res *Results) error {
	bins := []string{"safe-ipam", "host-local", "ipam-floor", "safe-ipam-etcd"}
	runs := map[string][]time.Duration{}
	for i := 0; i < r.opts.VersionRuns; i++ {
		for _, bin := range bins {
			d, err := r.execVersion(ctx, bin)
			if err != nil {
				return err
			}
			runs[bin] = append(runs[bin], d)
		}
	}
	s, _, _ := percentiles(runs["safe-ipam"])
	h, _, _ := percentiles(runs["host-local"])
	f, _, _ := percentiles(runs["ipam-floor"])
	e, _, _ := percentiles(runs["safe-ipam-etcd"])
	res.Exec = ExecCost{SafeIPAMVersionP50: s, HostLocalVersionP50: h, Ratio: s / h, FloorVersionP50: f, EtcdBuildVersionP50: e}
	return nil
}

func (r *rig) execVersion(ctx context.Context, bin string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(r.binDir, bin))
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
	start := time.Now()
	out, err := cmd.Output()
	if err != nil || !bytes.Contains(out, []byte("supportedVersions")) {
		return 0, fmt.Errorf("%s VERSION: %v %s", bin, err, out)
	}
	return time.Since(start), nil
}

// RoundTrips are etcd requests per operation, counted by the server.
type RoundTrips struct {
	DelegateAdd float64 `json:"delegateAdd"`
	DelegateDel float64 `json:"delegateDel"`
	SafeIPAMAdd float64 `json:"safeIpamAdd"`
	SafeIPAMDel float64 `json:"safeIpamDel"`
}

// measureRoundTrips counts the etcd server's handled unary requests for N
// operations of the delegate alone and of safe-ipam with the etcd store:
// the difference is safe-ipam's own.
func (r *rig) measureRoundTrips(ctx context.Context, res *Results) error {
	const n = 20
	per := map[string]map[string]float64{}
	for _, c := range []string{Alone, Etcd} {
		list, err := r.conflist(c)
		if err != nil {
			return err
		}
		per[c] = map[string]float64{}
		pods := make([]pod, n)
		for i := range pods {
			pods[i] = pod{containerID: fmt.Sprintf("rt-%s-%d", confName(c), i), name: fmt.Sprintf("rt-%d", i)}
		}
		for _, op := range []string{"ADD", "DEL"} {
			before, err := etcdRequests()
			if err != nil {
				return err
			}
			for _, p := range pods {
				if err := r.do(ctx, op, list, p); err != nil {
					return err
				}
			}
			after, err := etcdRequests()
			if err != nil {
				return err
			}
			per[c][op] = (after - before) / n
		}
	}
	res.RoundTrips = RoundTrips{DelegateAdd: per[Alone]["ADD"], DelegateDel: per[Alone]["DEL"],
		SafeIPAMAdd: per[Etcd]["ADD"] - per[Alone]["ADD"], SafeIPAMDel: per[Etcd]["DEL"] - per[Alone]["DEL"]}
	return nil
}

// etcdRequests sums the in-process server's handled KV requests.
func etcdRequests() (float64, error) {
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range families {
		if f.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_service" && l.GetValue() == "etcdserverpb.KV" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total, nil
}

// Churn is one level of parallel pod churn.
type Churn struct {
	Config       string  `json:"config"`
	Workers      int     `json:"workers"`
	Ops          int     `json:"ops"`
	OpsPerSec    float64 `json:"opsPerSec"`
	Errors       int     `json:"errors"`
	Leaked       int     `json:"leaked"`
	Duplicated   int     `json:"duplicated"`
	Inconsistent int     `json:"inconsistent"`
}

// measureChurn: each worker recreates its StatefulSet pod (same name, new
// container ID) over and over. The delegate alone and the design floors
// churn too, so that throughput is a ratio.
func (r *rig) measureChurn(ctx context.Context, res *Results) error {
	for _, c := range withFloors() {
		for _, workers := range []int{1, 8, 32} {
			ch, err := r.churn(ctx, c, workers)
			if err != nil {
				return err
			}
			res.Churn = append(res.Churn, ch)
		}
	}
	return nil
}

func (r *rig) churn(ctx context.Context, config string, workers int) (Churn, error) {
	list, err := r.conflist(config)
	if err != nil {
		return Churn{}, err
	}
	cycles := r.opts.ChurnOps / workers
	h := &holders{byAddr: map[string]string{}}
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < cycles; i++ {
				p := pod{containerID: fmt.Sprintf("churn-%s-%d-%d-%d", confName(config), workers, w, i), name: fmt.Sprintf("web-%d", w)}
				r.cycle(ctx, list, p, h)
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	ops := 2 * cycles * workers
	leaked, inconsistent, err := r.leftovers(ctx)
	if err != nil {
		return Churn{}, err
	}
	return Churn{Config: config, Workers: workers, Ops: ops, OpsPerSec: float64(ops) / elapsed.Seconds(), Errors: h.errors,
		Leaked: leaked, Duplicated: h.duplicated, Inconsistent: inconsistent}, nil
}

// holders tracks which running pod holds which address during churn: an
// ADD handed an address another running pod holds is a duplicate.
type holders struct {
	mu                 sync.Mutex
	byAddr             map[string]string
	errors, duplicated int
}

func (r *rig) cycle(ctx context.Context, list *libcni.NetworkConfigList, p pod, h *holders) {
	addrs, err := r.addAddrs(ctx, list, p)
	h.mu.Lock()
	if err != nil {
		h.errors++
		h.mu.Unlock()
		r.logf("churn: %v", err)
		return
	}
	for _, a := range addrs {
		if other, held := h.byAddr[a]; held {
			h.duplicated++
			r.logf("churn: %s got %s, which %s holds", p.containerID, a, other)
		}
		h.byAddr[a] = p.containerID
	}
	h.mu.Unlock()
	err = r.del(ctx, list, p)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.errors++
		r.logf("churn: %v", err)
		return // the pod keeps its addresses until a DEL succeeds
	}
	for _, a := range addrs {
		delete(h.byAddr, a)
	}
}

// leftovers counts, in Calico's data, addresses still allocated (every
// churned pod was deleted, so each is a leak) and the simulator's view of
// inconsistent documents.
func (r *rig) leftovers(ctx context.Context) (leaked, inconsistent int, err error) {
	snap, err := calicosim.State(ctx, r.etcd.Client())
	if err != nil {
		return 0, 0, err
	}
	return len(snap.Allocations()), len(snap.Inconsistencies()), nil
}

// measureRSS runs single ADDs directly and reads peak RSS from wait4.
// Linux folds a reaped child's peak into its parent's, so with
// calico-ipam as delegate the figure is the larger of the two processes;
// with host-local (a small delegate) it is safe-ipam's own.
func (r *rig) measureRSS(ctx context.Context, res *Results) error {
	var err error
	if res.PeakRSSKiB, err = r.rssOfAdd(ctx, "rss-1", r.plugin(Etcd)); err != nil {
		return err
	}
	own, ownFile := r.withHostLocal(Etcd), r.withHostLocal(File)
	if res.OwnRSSKiB, err = r.rssOfAdd(ctx, "rss-2", own); err != nil {
		return err
	}
	if res.OwnFileRSSKiB, err = r.rssOfAdd(ctx, "rss-3", ownFile); err != nil {
		return err
	}
	for cid, plugin := range map[string]map[string]any{"rss-1": r.plugin(Etcd), "rss-2": own, "rss-3": ownFile} {
		if err := r.runPlugin(ctx, "DEL", cid, plugin); err != nil {
			return err
		}
	}
	return nil
}

// withHostLocal is safe-ipam's config with host-local, a small delegate,
// so that a process's peak RSS is safe-ipam's own.
func (r *rig) withHostLocal(config string) map[string]any {
	p := r.plugin(config)
	ipam := p["ipam"].(map[string]any)
	ipam["delegate"] = map[string]any{"type": "host-local"}
	ipam["ranges"] = [][]map[string]string{{{"subnet": "10.200.0.0/24"}}}
	ipam["dataDir"] = filepath.Join(r.dir, "host-local")
	return p
}

func (r *rig) rssOfAdd(ctx context.Context, cid string, plugin map[string]any) (int64, error) {
	cmd, err := r.pluginCommand(ctx, "ADD", cid, plugin)
	if err != nil {
		return 0, err
	}
	r.measured(cmd)
	if out, err := cmd.Output(); err != nil {
		return 0, fmt.Errorf("ADD: %v %s", err, out)
	}
	return r.peakRSS()
}

// measured makes cmd run under peakrss, whose own small footprint is what
// the command's high-water mark starts from.
func (r *rig) measured(cmd *exec.Cmd) {
	cmd.Args = append([]string{filepath.Join(r.binDir, "peakrss"), "-o", filepath.Join(r.dir, "peakrss")}, cmd.Args...)
	cmd.Args[3] = cmd.Path
	cmd.Path = cmd.Args[0]
}

func (r *rig) peakRSS() (int64, error) { return ReadPeakRSS(filepath.Join(r.dir, "peakrss")) }

// ReadPeakRSS reads the KiB peakrss wrote to path.
func ReadPeakRSS(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var kib int64
	_, err = fmt.Sscan(string(data), &kib)
	return kib, err
}

// pluginCommand is the CNI binary of one plugin config (its type) run
// directly with it.
func (r *rig) pluginCommand(ctx context.Context, verb, cid string, plugin map[string]any) (*exec.Cmd, error) {
	plugin["cniVersion"], plugin["name"] = "1.0.0", "bench-rss"
	conf, err := json.Marshal(plugin)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(r.binDir, plugin["type"].(string)))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+verb, "CNI_CONTAINERID="+cid, "CNI_NETNS=/var/run/netns/safe-ipam-bench-none",
		"CNI_IFNAME=eth0", "CNI_PATH="+r.binDir, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=rss")
	cmd.Stdin = bytes.NewReader(conf)
	return cmd, nil
}

func (r *rig) runPlugin(ctx context.Context, verb, cid string, plugin map[string]any) error {
	cmd, err := r.pluginCommand(ctx, verb, cid, plugin)
	if err != nil {
		return err
	}
	if out, err := cmd.Output(); err != nil {
		return fmt.Errorf("%s %s: %v %s", verb, cid, err, out)
	}
	return nil
}
