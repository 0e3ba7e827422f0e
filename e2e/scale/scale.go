// Package scale is `make scale`: what safe-ipam's periodic work costs
// Calico's datastore as the cluster grows. On etcd, a real etcd holds
// Calico's Nodes and safe-ipam's records of N nodes x P pods (the etcd
// store's own layout, written through the store); on the Kubernetes
// datastore, a real kube-apiserver holds Calico's IPAM CRDs and N Nodes,
// and each simulated node its P pods' addresses and, in its file store,
// their records. Several simulated nodes run the DaemonSet's command
// lines as deploy/safe-ipam.yaml writes them (only paths, ports and
// periods changed): install, the watch and its readiness probe, gc. The
// datastore's own counters say what it served each, and the report
// extrapolates the steady state to 1,000 and 5,000 nodes with its
// formula. MeasureDetect is `make scale-detect`: one round of the
// cluster-wide check, safe-ipam detect, against N x P running pods in a
// real kube-apiserver and their addresses in Calico's datastore. Its
// small configurations run in `make test` (scale_test.go).
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Options size one simulation.
type Options struct {
	// Datastore is Calico's: datastore.Etcd (default) or
	// datastore.Kubernetes.
	Datastore string
	// Nodes x Pods are planted: Calico's Nodes and safe-ipam's records.
	Nodes, Pods int
	// BlockSize is the pool's block size (Calico's default: 26).
	BlockSize int
	// Simulated nodes (the first ones) run the DaemonSet's containers.
	Simulated int
	// Every is gc's --every, the manifest's period scaled down; the
	// grace for dead nodes and the watch's full checks are scaled with it.
	Every time.Duration
	// Periods of gc measured in each phase.
	Periods int
	// Bin holds safe-ipam, safe-ipam-admin and calico-ipam (the
	// simulator, also installed as Calico's binary).
	Bin      string
	Manifest string
	Dir      string
	Log      io.Writer
}

// Network is the simulated cluster's Calico network.
const Network = "k8s-pod-network"

// Result is what the datastore served.
type Result struct {
	Opts Options
	// About says what was measured, and by which counters.
	About string
	// Leader is one gc round of the elected node (its own records and the
	// sweep of every node's); Follower one of any other node.
	Leader, Follower Served
	// Check is one full check by hand (safe-ipam doctor) on a node: what
	// the watch's first full check reads. Watch is one of the watch's
	// later full checks, which remember what cannot change.
	Check, Watch Served
	// Probe is every readiness probe run, Probes of them.
	Probe  Served
	Probes int
	// Listers are the simulated nodes that received at least the other
	// nodes' record keys while every gc ran: the elected one alone (etcd).
	Listers []string
	// OtherKeyBytes is the size of the other nodes' record keys (etcd).
	OtherKeyBytes int64
	// Claims are the AddressClaims planted (every node's pods'), and
	// ClaimBytes their size as the API server stores them (JSON).
	Claims     int
	ClaimBytes int64
	// Released is how long after Calico forgot a node its records were
	// gone, with every gc running, and after the leader stopped (etcd:
	// on the Kubernetes datastore a node's records live on the node).
	Released, ReleasedAfterFailover time.Duration
	// ReleasedRounds, and ReleasedRoundsAfterFailover, are the rounds
	// the gc that released the records finished meanwhile, the releasing
	// one included (its metrics): how many periods the release took,
	// however slow a busy machine made each round.
	ReleasedRounds, ReleasedRoundsAfterFailover int
}

// cluster is Calico's datastore of the simulation.
type cluster interface {
	describe() string
	// plant writes the pool, every node's Node and the records the
	// datastore's mode keeps; it returns the size of the record keys of
	// the nodes that are not simulated, where the cluster shares them.
	plant(ctx context.Context) (int64, error)
	// conflist is Calico's network config on n (and writes what it names).
	conflist(n *node) (string, error)
	// target is the address the nodes' proxies forward to.
	target() string
	served(ctx context.Context) (Served, error)
	// sweeps says that one gc sweeps every node's records (etcd).
	sweeps() bool
	// countClaims counts the AddressClaims and their bytes as stored
	// (the Kubernetes datastore's; none on etcd).
	countClaims(ctx context.Context) (int, int64, error)
	// forget deletes node i from Calico's datastore and waits until its
	// records are gone.
	forget(ctx context.Context, i int, limit time.Duration) (time.Duration, error)
	close()
}

// Run runs one simulation.
func Run(ctx context.Context, o Options) (*Result, error) {
	cmds, err := ReadManifest(o.Manifest)
	if err != nil {
		return nil, err
	}
	if o.BlockSize == 0 {
		o.BlockSize = 26
	}
	var c cluster
	switch o.Datastore {
	case "", datastore.Etcd:
		o.Datastore = datastore.Etcd
		c, err = newEtcdCluster(o)
	case datastore.Kubernetes:
		c, err = newKubeCluster(ctx, o)
	default:
		err = fmt.Errorf("datastore %q: want %s or %s", o.Datastore, datastore.Etcd, datastore.Kubernetes)
	}
	if err != nil {
		return nil, err
	}
	defer c.close()
	s := &sim{o: o, cmds: cmds, c: c, res: &Result{Opts: o, About: c.describe()}}
	defer s.stop()
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"planting the cluster", s.plant},
		{"setting the simulated nodes up", s.setUp},
		{"the watch and its probe", s.watchAndProbe},
		{"the watch's later full checks", s.watchChecks},
		{"gc", s.gc},
		{"a forgotten node", s.forget},
	}
	for _, step := range steps {
		start := time.Now()
		if err := step.do(ctx); err != nil {
			return s.res, fmt.Errorf("%s: %w", step.what, err)
		}
		fmt.Fprintf(o.Log, "scale: %s: %s\n", step.what, time.Since(start).Round(time.Millisecond))
	}
	return s.res, nil
}

// sim is one simulation's state.
type sim struct {
	o     Options
	cmds  Commands
	c     cluster
	res   *Result
	nodes []*node
}

// node is one simulated node: its dirs, its runtime, its way to the
// datastore and the containers it runs.
type node struct {
	name    string
	dir     string
	proxy   *proxy
	runtime *runtime
	watch   *process
	gc      *process
	watchAt string // the watch's metrics address
}

func nodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

func containerID(node, pod int) string { return fmt.Sprintf("c%05dp%04d", node, pod) }

func attachment(node, pod int) record.Attachment {
	return record.Attachment{Network: Network, ContainerID: containerID(node, pod), IfName: "eth0"}
}

func (s *sim) plant(ctx context.Context) error {
	var err error
	if s.res.OtherKeyBytes, err = s.c.plant(ctx); err != nil {
		return err
	}
	s.res.Claims, s.res.ClaimBytes, err = s.c.countClaims(ctx)
	return err
}

// setUp gives each simulated node its CNI dirs with Calico installed, a
// runtime listing its pods, a proxy to the datastore, and runs the
// install init container.
func (s *sim) setUp(ctx context.Context) error {
	calicoIPAM, err := os.ReadFile(filepath.Join(s.o.Bin, "calico-ipam"))
	if err != nil {
		return err
	}
	for i := range s.o.Simulated {
		n := &node{name: nodeName(i), dir: filepath.Join(s.o.Dir, nodeName(i))}
		s.nodes = append(s.nodes, n)
		for _, d := range []string{"bin", "net.d", "run", "state", "calico-run"} {
			if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
				return err
			}
		}
		for _, b := range []string{"calico", "calico-ipam"} {
			if err := os.WriteFile(filepath.Join(n.dir, "bin", b), calicoIPAM, 0o755); err != nil {
				return err
			}
		}
		if n.proxy, err = startProxy(s.c.target()); err != nil {
			return err
		}
		conflist, err := s.c.conflist(n)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.dir, "net.d", "10-calico.conflist"), []byte(conflist), 0o644); err != nil {
			return err
		}
		var ids []string
		for p := range s.o.Pods {
			ids = append(ids, containerID(i, p))
		}
		if n.runtime, err = startRuntime(filepath.Join(n.dir, "run", "containerd.sock"), ids); err != nil {
			return err
		}
		if n.watchAt, err = freeAddr(); err != nil {
			return err
		}
		if out, err := s.command(ctx, n, s.cmds.Install).CombinedOutput(); err != nil {
			return fmt.Errorf("install on %s: %v\n%s", n.name, err, out)
		}
	}
	return nil
}

// rewrite is the manifest's paths, ports and periods for node n.
func (s *sim) rewrite(n *node) Rewrite {
	every, err := time.ParseDuration(flagValue(s.cmds.GC, "--every"))
	grace, gerr := time.ParseDuration(flagValue(s.cmds.GC, "--dead-node-grace"))
	scaled := func(d time.Duration) string {
		if err != nil || gerr != nil || every == 0 {
			return "0s"
		}
		return (time.Duration(float64(s.o.Every) * float64(d) / float64(every))).String()
	}
	return Rewrite{
		Paths: map[string]string{
			"/usr/local/bin/":                        s.o.Bin + "/",
			"/opt/cni/bin":                           filepath.Join(n.dir, "bin"),
			"/etc/cni/net.d":                         filepath.Join(n.dir, "net.d"),
			"/run/containerd/containerd.sock":        filepath.Join(n.dir, "run", "containerd.sock"),
			"/var/lib/cni/safe-ipam":                 filepath.Join(n.dir, "state"),
			"unix:///run/containerd/containerd.sock": "unix://" + filepath.Join(n.dir, "run", "containerd.sock"),
		},
		Flags: map[string]string{
			"--every":           s.o.Every.String(),
			"--dead-node-grace": scaled(grace),
			"--metrics-addr":    n.watchAt,
			"--ready-from":      n.watchAt,
			// No probe socket: the nodes share one machine's /run, and
			// the probe asks the port (its cost is what is measured).
			"--probe-socket": "",
		},
	}
}

func flagValue(cmd []string, name string) string {
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func (s *sim) command(ctx context.Context, n *node, cmd []string) *exec.Cmd {
	args := s.rewrite(n).Apply(cmd)
	c := exec.CommandContext(ctx, args[0], args[1:]...)
	c.Env = append(os.Environ(), "CNI_PATH="+filepath.Join(n.dir, "bin"))
	return c
}

// watchAndProbe starts every node's watch, waits until each is ready,
// then runs every node's readiness probe as the manifest writes it
// (counting what the datastore served meanwhile: nothing), and a full
// check, the watch's first, by hand on each node.
func (s *sim) watchAndProbe(ctx context.Context) error {
	for _, n := range s.nodes {
		var err error
		if n.watch, err = start(s.command(ctx, n, s.cmds.Watch), filepath.Join(n.dir, "watch.log")); err != nil {
			return err
		}
	}
	for _, n := range s.nodes {
		if err := waitFor(60*time.Second, func() bool { return s.probe(ctx, n) == nil }); err != nil {
			return fmt.Errorf("the watch of %s never turned ready: %v\n%s", n.name, s.probe(ctx, n), n.watch.output())
		}
	}
	if err := s.quiet(ctx); err != nil {
		return err
	}
	before, err := s.c.served(ctx)
	if err != nil {
		return err
	}
	for range 3 {
		for _, n := range s.nodes {
			if err := s.probe(ctx, n); err != nil {
				return err
			}
			s.res.Probes++
		}
	}
	after, err := s.c.served(ctx)
	if err != nil {
		return err
	}
	s.res.Probe = after.Sub(before)
	for _, n := range s.nodes {
		n.watch.stop()
	}
	byHand := slicesWithout(s.cmds.Probe, "--ready-from")
	if before, err = s.c.served(ctx); err != nil {
		return err
	}
	for _, n := range s.nodes {
		if out, err := s.command(ctx, n, byHand).CombinedOutput(); err != nil {
			return fmt.Errorf("doctor on %s: %v\n%s", n.name, err, out)
		}
	}
	after, err = s.c.served(ctx)
	s.res.Check = after.Sub(before).Div(float64(len(s.nodes)))
	return err
}

// watchChecks runs every node's watch again with its full check at gc's
// scaled period, and measures what one of its later full checks (each
// node's second and after: the memo's) costs, by the checks the watches
// count.
func (s *sim) watchChecks(ctx context.Context) error {
	watch := append(slices.Clone(s.cmds.Watch), "--full-check-every="+s.o.Every.String())
	for _, n := range s.nodes {
		var err error
		if n.watch, err = start(s.command(ctx, n, watch), filepath.Join(n.dir, "watch-checks.log")); err != nil {
			return err
		}
	}
	defer func() {
		for _, n := range s.nodes {
			n.watch.stop()
		}
	}()
	// A full check the store does not answer in time (a loaded machine)
	// is asked again after the watch's backoff, 30 s then 60 s: the wait
	// covers two of those.
	if err := waitFor(10*s.o.Every+2*time.Minute, func() bool { return s.fullChecks(2) >= 0 }); err != nil {
		var logs strings.Builder
		for _, n := range s.nodes {
			got, serr := scrapeSum("http://"+n.watchAt+"/metrics", "safe_ipam_full_checks_total")
			fmt.Fprintf(&logs, "\n%s: %d full checks (%v); its watch's log ends:\n%s", n.name, got, serr, n.watch.output())
		}
		return fmt.Errorf("the watches' first two full checks: %v%s", err, logs.String())
	}
	checks, before, err := s.settledChecks(ctx)
	if err != nil {
		return err
	}
	time.Sleep(time.Duration(s.o.Periods) * s.o.Every)
	end, after, err := s.settledChecks(ctx)
	if err != nil {
		return err
	}
	if done := end - checks; done > 0 {
		s.res.Watch = after.Sub(before).Div(float64(done))
	}
	return nil
}

// settledChecks is the full checks the watches counted and what the
// datastore served, read while no full check is under way: a watch counts
// a check as it starts it, so a reading between the count and the check's
// requests would charge them to the wrong side (CI saw a later check cost
// 2.4 requests where each made 2).
func (s *sim) settledChecks(ctx context.Context) (int, Served, error) {
	const settle = 300 * time.Millisecond
	for deadline := time.Now().Add(20 * s.o.Every); time.Now().Before(deadline); {
		first, err := s.c.served(ctx)
		if err != nil {
			return 0, Served{}, err
		}
		checks := s.fullChecks(0)
		time.Sleep(settle)
		then, err := s.c.served(ctx)
		if err != nil {
			return 0, Served{}, err
		}
		if checks >= 0 && s.fullChecks(0) == checks && then.Requests == first.Requests {
			return checks, then, nil
		}
	}
	return 0, Served{}, errors.New("the watches' full checks never paused to be counted")
}

// fullChecks is the full checks every watch counted, or -1 while one
// of them counted fewer than least.
func (s *sim) fullChecks(least int) int {
	total := 0
	for _, n := range s.nodes {
		got, err := scrapeSum("http://"+n.watchAt+"/metrics", "safe_ipam_full_checks_total")
		if err != nil || got < least {
			return -1
		}
		total += got
	}
	return total
}

// scrapeSum is the sum of counter name's series at url, whatever their
// labels.
func scrapeSum(url, name string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		var n float64
		if _, err := fmt.Sscan(rest[strings.LastIndexByte(rest, ' ')+1:], &n); err != nil {
			return 0, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		sum, found = sum+n, true
	}
	if !found {
		return 0, fmt.Errorf("%s: no %s", url, name)
	}
	return int(sum), nil
}

// probe runs node n's readiness probe as the manifest writes it.
func (s *sim) probe(ctx context.Context, n *node) error {
	out, err := s.command(ctx, n, s.cmds.Probe).CombinedOutput()
	if err != nil {
		return fmt.Errorf("readiness probe of %s: %v: %s", n.name, err, out)
	}
	return nil
}

func slicesWithout(cmd []string, flag string) []string {
	var out []string
	for _, a := range cmd {
		if !strings.HasPrefix(a, flag+"=") {
			out = append(out, a)
		}
	}
	return out
}

// quiet waits until the datastore serves nothing for a while: the
// watches' start-up (the first full check, the address index migration)
// is over.
func (s *sim) quiet(ctx context.Context) error {
	last, err := s.c.served(ctx)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		now, err := s.c.served(ctx)
		if err != nil {
			return err
		}
		if now.Requests == last.Requests {
			return nil
		}
		last = now
	}
	return errors.New("the datastore never went quiet")
}

// gc runs the gc container of the first node alone for some periods (it
// leads), then every node's, and measures each phase's rounds.
func (s *sim) gc(ctx context.Context) error {
	leader := s.nodes[0]
	var err error
	if leader.gc, err = start(s.command(ctx, leader, s.cmds.GC), filepath.Join(leader.dir, "gc.log")); err != nil {
		return err
	}
	alone, err := s.measure(ctx, s.o.Periods)
	if err != nil {
		return err
	}
	s.res.Leader = alone
	for _, n := range s.nodes[1:] {
		if n.gc, err = start(s.command(ctx, n, s.cmds.GC), filepath.Join(n.dir, "gc.log")); err != nil {
			return err
		}
	}
	received := map[*node]int64{}
	for _, n := range s.nodes {
		received[n] = n.proxy.received.Load()
	}
	all, err := s.measure(ctx, s.o.Periods)
	if err != nil {
		return err
	}
	if len(s.nodes) > 1 {
		s.res.Follower = all.Sub(alone).Div(float64(len(s.nodes) - 1))
	}
	for _, n := range s.nodes {
		if s.c.sweeps() && n.proxy.received.Load()-received[n] >= s.res.OtherKeyBytes {
			s.res.Listers = append(s.res.Listers, n.name)
		}
	}
	return nil
}

// measure is what the datastore served per period over the next
// periods, starting half a period on (a round of each running gc falls in
// each period).
func (s *sim) measure(ctx context.Context, periods int) (Served, error) {
	time.Sleep(s.o.Every / 2)
	before, err := s.c.served(ctx)
	if err != nil {
		return Served{}, err
	}
	time.Sleep(time.Duration(periods) * s.o.Every)
	after, err := s.c.served(ctx)
	return after.Sub(before).Div(float64(periods)), err
}

// forget deletes the Calico Node of the last planted node and times the
// release of its records; then stops the leader's gc (its lease is
// revoked) and does the same with another node. Only where one gc sweeps
// every node's records (etcd).
func (s *sim) forget(ctx context.Context) error {
	if !s.c.sweeps() {
		return nil
	}
	var err error
	if s.res.Released, s.res.ReleasedRounds, err = s.forgetNode(ctx, s.o.Nodes-1); err != nil {
		return err
	}
	s.nodes[0].gc.stop()
	if len(s.nodes) < 2 || s.o.Nodes-2 < s.o.Simulated {
		return nil
	}
	s.res.ReleasedAfterFailover, s.res.ReleasedRoundsAfterFailover, err = s.forgetNode(ctx, s.o.Nodes-2)
	return err
}

// forgetNode has Calico forget node i and returns how long its records
// took to go, and how many rounds the gc that released them finished
// meanwhile, once it finished the releasing one.
func (s *sim) forgetNode(ctx context.Context, i int) (time.Duration, int, error) {
	before, err := s.gcCounts()
	if err != nil {
		return 0, 0, err
	}
	took, err := s.c.forget(ctx, i, 5*s.o.Every+30*time.Second)
	if err != nil {
		return 0, 0, fmt.Errorf("the records of %s, which Calico forgot, were not released: %v\n%s", nodeName(i), err, s.nodes[len(s.nodes)-1].gc.output())
	}
	rounds := -1
	err = waitFor(2*s.o.Every+30*time.Second, func() bool {
		after, err := s.gcCounts()
		for n, c := range after {
			if err == nil && c.swept > before[n].swept {
				rounds = c.rounds - before[n].rounds
			}
		}
		return rounds >= 0
	})
	if err != nil {
		return 0, 0, fmt.Errorf("no gc counted the release of %s's records in its metrics: %v", nodeName(i), err)
	}
	return took, rounds, nil
}

// gcCount is what a gc's metrics count: rounds finished, and records
// its sweeps released.
type gcCount struct{ rounds, swept int }

// gcCounts reads each running gc's metrics (it serves them at the
// address the watch, stopped by now, had).
func (s *sim) gcCounts() (map[*node]gcCount, error) {
	counts := map[*node]gcCount{}
	for _, n := range s.nodes {
		if n.gc == nil || n.gc.stopped() {
			continue
		}
		var c gcCount
		var err error
		url := "http://" + n.watchAt + "/metrics"
		if c.rounds, err = scrapeSum(url, "safe_ipam_gc_rounds_total"); err == nil {
			c.swept, err = scrapeSum(url, "safe_ipam_gc_dead_node_sweep_released_total")
		}
		if err != nil {
			return nil, fmt.Errorf("the gc metrics of %s: %w", n.name, err)
		}
		counts[n] = c
	}
	return counts, nil
}

func (s *sim) stop() {
	for _, n := range s.nodes {
		for _, p := range []*process{n.watch, n.gc} {
			if p != nil {
				p.stop()
			}
		}
		if n.runtime != nil {
			n.runtime.close()
		}
		if n.proxy != nil {
			n.proxy.close()
		}
	}
}

// process is a long-running container command.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	once sync.Once
}

func start(cmd *exec.Cmd, log string) (*process, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", cmd.Args, err)
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// stop sends SIGTERM, as the kubelet does, and waits a little.
func (p *process) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
	})
}

func (p *process) stopped() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) output() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func waitFor(limit time.Duration, ok func() bool) error {
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
	}
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
