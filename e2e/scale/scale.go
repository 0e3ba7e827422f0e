// Package scale is `make scale`: what safe-ipam's periodic work costs
// Calico's etcd as the cluster grows. A real etcd holds Calico's Nodes and
// safe-ipam's records of N nodes x P pods (the etcd store's own layout,
// written through the store); several simulated nodes run the DaemonSet's
// command lines as deploy/safe-ipam.yaml writes them (only paths, ports
// and periods changed): install, the watch and its readiness probe, gc.
// etcd's own counters say what it served each, and the report
// extrapolates the steady state to 1,000 and 5,000 nodes with its formula.
// Its small configuration runs in `make test` (scale_test.go).
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
)

// Options size one simulation.
type Options struct {
	// Nodes x Pods are planted: Calico's Nodes and safe-ipam's records.
	Nodes, Pods int
	// Simulated nodes (the first ones) run the DaemonSet's containers.
	Simulated int
	// Every is gc's --every, the manifest's period scaled down; the
	// grace for dead nodes is scaled with it.
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

// Result is what etcd served.
type Result struct {
	Opts Options
	// Leader is one gc round of the elected node (its own records and the
	// sweep of every node's); Follower one of any other node.
	Leader, Follower Served
	// Check is one full check of the watch (safe-ipam doctor) on a node.
	Check Served
	// Probe is every readiness probe run, Probes of them.
	Probe  Served
	Probes int
	// Listers are the simulated nodes that received at least the other
	// nodes' record keys while every gc ran: the elected one alone.
	Listers []string
	// OtherKeyBytes is the size of the other nodes' record keys.
	OtherKeyBytes int64
	// Released is how long after Calico forgot a node its records were
	// gone, with every gc running, and after the leader stopped.
	Released, ReleasedAfterFailover time.Duration
}

// Run runs one simulation.
func Run(ctx context.Context, o Options) (*Result, error) {
	cmds, err := ReadManifest(o.Manifest)
	if err != nil {
		return nil, err
	}
	etcd, err := etcdtest.New(filepath.Join(o.Dir, "etcd"))
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	s := &sim{o: o, cmds: cmds, etcd: etcd, cli: etcd.Client(), res: &Result{Opts: o}}
	defer s.stop()
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"planting the cluster", s.plant},
		{"setting the simulated nodes up", s.setUp},
		{"the watch and its probe", s.watchAndProbe},
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
	etcd  *etcdtest.Server
	cli   *clientv3.Client
	res   *Result
	nodes []*node
}

// node is one simulated node: its dirs, its runtime, its way to etcd
// and the containers it runs.
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

// plant writes Calico's Nodes and every node's records, several writers
// at once, through the etcd store.
func (s *sim) plant(ctx context.Context) error {
	if err := calicosim.SeedIPPool(ctx, s.cli, "default-ipv4-ippool", "10.0.0.0/8", 26); err != nil {
		return err
	}
	errs := make(chan error, s.o.Nodes)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs <- s.plantNode(ctx, i)
			}
		}()
	}
	for i := range s.o.Nodes {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	for i := s.o.Simulated; i < s.o.Nodes; i++ {
		for p := range s.o.Pods {
			s.res.OtherKeyBytes += int64(len(etcdstore.RecordKey(config.DefaultEtcdPrefix, nodeName(i), attachment(i, p))))
		}
	}
	return nil
}

func attachment(node, pod int) record.Attachment {
	return record.Attachment{Network: Network, ContainerID: containerID(node, pod), IfName: "eth0"}
}

func (s *sim) plantNode(ctx context.Context, i int) error {
	name := nodeName(i)
	if err := calicosim.SeedNode(ctx, s.cli, name); err != nil {
		return err
	}
	st := etcdstore.NewWithClient(s.cli, config.DefaultEtcdPrefix, name, 30*time.Second)
	old := time.Now().Add(-time.Hour)
	for p := range s.o.Pods {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(p + 1)})
		rec := &record.Record{Attachment: attachment(i, p), Node: name, Handle: Network + "." + containerID(i, p),
			PodNamespace: "default", PodName: containerID(i, p), State: record.Committed,
			IPs: []string{ip.String() + "/26"}, Created: old, Updated: old}
		if _, err := st.Commit(ctx, nil, rec); err != nil {
			return fmt.Errorf("record %s of %s: %w", rec.Attachment, name, err)
		}
	}
	return nil
}

// setUp gives each simulated node its CNI dirs with Calico installed, a
// runtime listing its pods, a proxy to etcd, and runs the install init
// container.
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
		if n.proxy, err = startProxy(strings.TrimPrefix(s.etcd.Endpoint(), "http://")); err != nil {
			return err
		}
		conflist := `{"name":"` + Network + `","cniVersion":"1.0.0","plugins":[{"type":"calico","datastore_type":"etcdv3",` +
			`"etcd_endpoints":"` + n.proxy.endpoint() + `","nodename":"` + n.name + `","ipam":{"type":"calico-ipam"}}]}`
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
// (counting what etcd served meanwhile: nothing), and a full check, the
// watch's periodic one, by hand on each node.
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
	if err := s.quiet(); err != nil {
		return err
	}
	before, err := served(prometheus.DefaultGatherer)
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
	after, err := served(prometheus.DefaultGatherer)
	if err != nil {
		return err
	}
	s.res.Probe = after.Sub(before)
	for _, n := range s.nodes {
		n.watch.stop()
	}
	byHand := slicesWithout(s.cmds.Probe, "--ready-from")
	before, _ = served(prometheus.DefaultGatherer)
	for _, n := range s.nodes {
		if out, err := s.command(ctx, n, byHand).CombinedOutput(); err != nil {
			return fmt.Errorf("doctor on %s: %v\n%s", n.name, err, out)
		}
	}
	after, err = served(prometheus.DefaultGatherer)
	s.res.Check = after.Sub(before).Div(float64(len(s.nodes)))
	return err
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

// quiet waits until etcd serves nothing for a while: the watches'
// start-up (the first full check, the address index migration) is over.
func (s *sim) quiet() error {
	last, err := served(prometheus.DefaultGatherer)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		now, err := served(prometheus.DefaultGatherer)
		if err != nil {
			return err
		}
		if now.Requests == last.Requests {
			return nil
		}
		last = now
	}
	return errors.New("etcd never went quiet")
}

// gc runs the gc container of the first node alone for some periods (it
// leads), then every node's, and measures each phase's rounds.
func (s *sim) gc(ctx context.Context) error {
	leader := s.nodes[0]
	var err error
	if leader.gc, err = start(s.command(ctx, leader, s.cmds.GC), filepath.Join(leader.dir, "gc.log")); err != nil {
		return err
	}
	alone, err := s.measure(s.o.Periods)
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
	all, err := s.measure(s.o.Periods)
	if err != nil {
		return err
	}
	if len(s.nodes) > 1 {
		s.res.Follower = all.Sub(alone).Div(float64(len(s.nodes) - 1))
	}
	for _, n := range s.nodes {
		if n.proxy.received.Load()-received[n] >= s.res.OtherKeyBytes {
			s.res.Listers = append(s.res.Listers, n.name)
		}
	}
	return nil
}

// measure is what etcd served per period over the next periods, starting
// half a period on (a round of each running gc falls in each period).
func (s *sim) measure(periods int) (Served, error) {
	time.Sleep(s.o.Every / 2)
	before, err := served(prometheus.DefaultGatherer)
	if err != nil {
		return Served{}, err
	}
	time.Sleep(time.Duration(periods) * s.o.Every)
	after, err := served(prometheus.DefaultGatherer)
	return after.Sub(before).Div(float64(periods)), err
}

// forget deletes the Calico Node of the last planted node and times the
// release of its records; then stops the leader's gc (its lease is
// revoked) and does the same with another node.
func (s *sim) forget(ctx context.Context) error {
	var err error
	if s.res.Released, err = s.forgetNode(ctx, s.o.Nodes-1); err != nil {
		return err
	}
	s.nodes[0].gc.stop()
	if len(s.nodes) < 2 || s.o.Nodes-2 < s.o.Simulated {
		return nil
	}
	s.res.ReleasedAfterFailover, err = s.forgetNode(ctx, s.o.Nodes-2)
	return err
}

func (s *sim) forgetNode(ctx context.Context, i int) (time.Duration, error) {
	name := nodeName(i)
	if _, err := s.cli.Delete(ctx, calico.NodeKey(name)); err != nil {
		return 0, err
	}
	start := time.Now()
	st := etcdstore.NewWithClient(s.cli, config.DefaultEtcdPrefix, "", 30*time.Second)
	err := waitFor(5*s.o.Every+30*time.Second, func() bool {
		counts, err := st.RecordCounts(ctx, Network)
		return err == nil && counts[name] == 0
	})
	if err != nil {
		return 0, fmt.Errorf("the records of %s, which Calico forgot, were not released: %v\n%s", name, err, s.nodes[len(s.nodes)-1].gc.output())
	}
	return time.Since(start), nil
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
