// Package bench measures what safe-ipam costs on top of its delegate, the
// way a runtime invokes it (libcni exec of a conflist), in one run against
// one etcd: latency, exec cost, etcd round trips, churn, RSS and audit.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
)

// Options size the run.
type Options struct {
	Samples      int    // ADD+DEL pairs per configuration
	TraceSamples int    // traced ADD+DEL pairs per store for the breakdown
	VersionRuns  int    // VERSION execs per binary
	ChurnOps     int    // ADD+DEL cycles per churn level, over all workers
	AuditAllocs  int    // allocations for the audit measurement (0 skips)
	CalicoIPAM   string // a real calico-ipam binary; "" builds the simulator
	Log          io.Writer
	KeepWorkDir  bool
}

// Results is everything measured; it is written to bench.json.
type Results struct {
	Machine    string             `json:"machine"`
	Delegate   string             `json:"delegate"`
	Latency    []Latency          `json:"latency"`
	Ratios     map[string]float64 `json:"ratios"`
	Exec       ExecCost           `json:"exec"`
	Breakdown  []Breakdown        `json:"breakdown"`
	RoundTrips RoundTrips         `json:"etcdRoundTrips"`
	Churn      []Churn            `json:"churn"`
	PeakRSSKiB int64              `json:"peakRSSKiBOneAdd"`
	OwnRSSKiB  int64              `json:"ownRSSKiBOneAdd"`
	// OwnFileRSSKiB is OwnRSSKiB with the file store.
	OwnFileRSSKiB int64      `json:"ownFileStoreRSSKiBOneAdd"`
	Audit         *AuditCost `json:"audit,omitempty"`
	// DesignFloor is, per store and op, what the design floor and
	// safe-ipam add to the delegate alone (see FloorCost).
	DesignFloor []FloorCost `json:"designFloor,omitempty"`
	// ClaimRequestsPerPod is how many requests on AddressClaims the API
	// server served per pod's ADD and DEL, with claims.
	ClaimRequestsPerPod float64 `json:"claimRequestsPerPod"`
}

// Latency is one configuration's per-operation latency in milliseconds.
type Latency struct {
	Config string  `json:"config"`
	Op     string  `json:"op"`
	P50    float64 `json:"p50ms"`
	P95    float64 `json:"p95ms"`
	P99    float64 `json:"p99ms"`
	N      int     `json:"n"`
}

// rig is the shared set-up: binaries, etcd, conflists.
type rig struct {
	dir      string
	binDir   string
	confDir  string
	etcd     *etcdtest.Server
	cni      *libcni.CNIConfig
	opts     Options
	delegate string
}

// Run measures everything and returns the results.
func Run(ctx context.Context, opts Options) (*Results, error) {
	r, err := setUp(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer r.tearDown()
	res := &Results{Machine: machine(), Delegate: r.delegate, Ratios: map[string]float64{}}
	steps := []struct {
		name string
		fn   func(context.Context, *Results) error
	}{
		{"latency", r.measureLatency},
		{"exec", r.measureExec},
		{"breakdown", r.measureBreakdown},
		{"round trips", r.measureRoundTrips},
		{"churn", r.measureChurn},
		{"rss", r.measureRSS},
		{"audit", r.measureAudit},
		{"kubevirt", r.measureKubeVirt},
		{"claims", r.measureClaims},
	}
	for _, s := range steps {
		r.logf("bench: %s ...", s.name)
		if err := s.fn(ctx, res); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	res.derive()
	return res, nil
}

// derive puts the figures the targets are stated in into Ratios.
func (res *Results) derive() {
	for _, c := range []string{File, Etcd} {
		for _, op := range []string{"ADD", "DEL"} {
			res.Ratios[fmt.Sprintf("%s %s added/floor", c, op)] = res.addedPerFloor(c, op)
		}
		res.Ratios[c+" churn vs alone min"] = res.churnVsAlone(c)
	}
	res.deriveFloor()
}

func (r *rig) logf(format string, args ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, format+"\n", args...)
	}
}

func setUp(ctx context.Context, opts Options) (*rig, error) {
	dir, err := os.MkdirTemp("", "safe-ipam-bench-")
	if err != nil {
		return nil, err
	}
	r := &rig{dir: dir, binDir: filepath.Join(dir, "bin"), confDir: filepath.Join(dir, "net.d"), opts: opts, delegate: "calico-ipam simulator"}
	if err := r.build(ctx); err != nil {
		r.tearDown()
		return nil, err
	}
	if r.etcd, err = etcdtest.New(filepath.Join(dir, "etcd")); err != nil {
		r.tearDown()
		return nil, err
	}
	cli := r.etcd.Client()
	if err := calicosim.SeedIPPool(ctx, cli, "default-ipv4-ippool", "10.96.0.0/12", 26); err != nil {
		r.tearDown()
		return nil, err
	}
	if err := calicosim.SeedNode(ctx, cli, "node1"); err != nil {
		r.tearDown()
		return nil, err
	}
	r.cni = libcni.NewCNIConfigWithCacheDir([]string{r.binDir}, filepath.Join(dir, "cache"), nil)
	if err := r.writeConflists(); err != nil {
		r.tearDown()
		return nil, err
	}
	return r, nil
}

func (r *rig) tearDown() {
	if r.etcd != nil {
		r.etcd.Close()
	}
	if !r.opts.KeepWorkDir {
		os.RemoveAll(r.dir)
	}
}

// ReleaseLDFlags are `make build`'s linker flags, without the version,
// and ReleaseTags its build tags.
const (
	ReleaseLDFlags = "-s -w"
	ReleaseTags    = "grpcnotrace"
)

// build compiles safe-ipam's three binaries and the design floor's two the
// way `make image` does
// for nodes: static (CGO_ENABLED=0; a dynamic build pays the dynamic
// loader, 1.4 ms per exec on a busy 2-core machine), stripped, tagged.
// host-local (the floor) is a plain go build, as issue 13 measured it, but
// static too, as its releases are, so that all three start alike.
func (r *rig) build(ctx context.Context) error {
	if err := os.MkdirAll(r.binDir, 0o755); err != nil {
		return err
	}
	pkgs := []string{"./e2e/cmd/peakrss"}
	if r.opts.CalicoIPAM == "" {
		pkgs = append(pkgs, "./e2e/cmd/calico-ipam")
	}
	out := r.binDir + string(filepath.Separator)
	static := []string{"CGO_ENABLED=0"}
	for _, build := range []gobuild.Build{
		// With the admin, for "safe-ipam audit".
		{Out: out, Pkgs: []string{"./plugin/safe-ipam", "./plugin/safe-ipam-etcd", "./plugin/safe-ipam-admin"}, Flags: []string{"-tags", ReleaseTags, "-ldflags", ReleaseLDFlags}, Env: static},
		// The design floor as the CNI binary's two builds: without the etcd
		// client for the file store, with it for the etcd store.
		{Out: filepath.Join(r.binDir, floorBinary(FloorFile)), Pkgs: []string{"./e2e/cmd/ipam-floor"}, Flags: []string{"-tags", ReleaseTags + ",floorfile", "-ldflags", ReleaseLDFlags}, Env: static},
		{Out: filepath.Join(r.binDir, floorBinary(FloorEtcd)), Pkgs: []string{"./e2e/cmd/ipam-floor"}, Flags: []string{"-tags", ReleaseTags, "-ldflags", ReleaseLDFlags}, Env: static},
		{Out: out, Pkgs: []string{"github.com/containernetworking/plugins/plugins/ipam/host-local"}, Env: static},
		{Out: out, Pkgs: pkgs},
	} {
		if err := build.Run(ctx); err != nil {
			return fmt.Errorf("building: %w", err)
		}
	}
	if r.opts.CalicoIPAM != "" {
		r.delegate = "calico-ipam " + r.opts.CalicoIPAM
		return copyExecutable(r.opts.CalicoIPAM, filepath.Join(r.binDir, "calico-ipam"))
	}
	return nil
}

func copyExecutable(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

func percentiles(samples []time.Duration) (p50, p95, p99 float64) {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 {
		if len(s) == 0 {
			return 0
		}
		i := int(q*float64(len(s)-1) + 0.5)
		return float64(s[i].Microseconds()) / 1000
	}
	return at(0.50), at(0.95), at(0.99)
}

// WriteJSON writes the results.
func (res *Results) WriteJSON(path string) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
