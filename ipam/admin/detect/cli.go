package detect

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/metrics"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
	"github.com/safe-ipam/safe-ipam/ipam/kubeconfig"
)

const usage = `Usage: safe-ipam detect [--datastore etcdv3|kubernetes] [--kubeconfig FILE]
                        [--etcd-endpoints URLS --etcd-cert FILE --etcd-key FILE --etcd-ca FILE]
                        [--leak-grace DURATION] [--settle DURATION]
                        [--every DURATION [--metrics-addr ADDR] [--lease NAMESPACE/NAME]]

The continuous check (issue 47), cluster-wide: it reads every pod the API
server holds (page by page) and Calico's allocations (one scan of its
blocks), and reports two running pods that list one address in
status.podIPs (shared-address), a pod whose Calico annotation
(cni.projectcalico.org/podIPs, or podIP) names other addresses than its
status.podIPs (annotation-mismatch), a running pod whose address
Calico's datastore does not hold for it, free or held for another pod
(early-release), and an address Calico holds for a pod missing from the
API server for longer than --leak-grace (gone-owner: kube-controllers'
leakGracePeriod, 15m by default; judged across rounds, so only with
--every). What the first three find is looked at again --settle later,
and reported only if found again (a pod starting, ending or getting a new
sandbox between the two listings looks like one for a moment). Each
finding is a log line, a Warning Event on the pods involved and their
Nodes, and, with --metrics-addr, the metrics safe_ipam_detect_findings
and safe_ipam_detect_unknown by kind. It reports; it never releases. A
listing that cannot be read whole makes its kinds unknown, never clean.

The Kubernetes API is --kubeconfig's (in a pod: its service account's);
on Calico's Kubernetes datastore it is Calico's data too. One instance per
cluster runs the rounds: with --lease, the one holding that Lease (the
others wait, serving no detect metrics); deploy/safe-ipam-detect.yaml runs
it so, every 2 minutes.

Exit codes (once, without --every): 0 clean, 1 findings, 2 a kind unknown
or an error.

Example: safe-ipam detect --datastore kubernetes --kubeconfig ~/.kube/config
         safe-ipam detect --datastore kubernetes --every 2m --metrics-addr :9256 --lease kube-system/safe-ipam-detect

`

// options are detect's own flags.
type options struct {
	every, leakGrace, settle time.Duration
	metricsAddr              string
	election
}

func (o *options) Register(fs *flag.FlagSet) {
	fs.DurationVar(&o.every, "every", 0, "run a round every DURATION until stopped (default: one round)")
	fs.DurationVar(&o.leakGrace, "leak-grace", detect.DefaultLeakGrace, "how long a pod must be missing before an address Calico holds for it is reported (kube-controllers' leakGracePeriod)")
	fs.DurationVar(&o.settle, "settle", DefaultSettle, "how long a round waits before it looks again at what it found (0: report the first look)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "with --every: serve the metrics and /healthz there")
	fs.StringVar(&o.Lease, "lease", "", "with --every: run the rounds only while holding this Lease, NAMESPACE/NAME (one instance per cluster)")
	o.election = defaultElection
}

// DefaultSettle is --settle's default: longer than a pod's sandbox takes
// to start again, short beside the period.
const DefaultSettle = 10 * time.Second

func (o *options) Resolve(*admin.Command) error {
	switch {
	case o.every < 0 || o.leakGrace <= 0 || o.settle < 0:
		return fmt.Errorf("--every %v, --leak-grace %v, --settle %v: want a positive grace, and a period and a settle time of zero or more", o.every, o.leakGrace, o.settle)
	case o.metricsAddr != "" && o.every == 0:
		return errors.New("--metrics-addr: only with --every")
	case o.Lease != "" && o.every == 0:
		return errors.New("--lease: only with --every")
	}
	return o.check()
}

// Run is safe-ipam detect.
func Run(args []string, stdout, stderr io.Writer) int {
	calico, opts := &admin.Datastores{}, &options{}
	cmd := admin.NewCommand("detect", usage, stderr, calico, opts)
	if code, stop := cmd.ParseOrExit(args); stop {
		return code
	}
	client, err := kubeClient(calico.Kubeconfig, calico.KubeconfigFlag)
	if err != nil {
		return cmd.Fail(err)
	}
	s := Sources{Kube: client, Allocations: CalicoAllocations(calico.Settings()), LeakGrace: opts.leakGrace, Settle: opts.settle,
		Unannotated: calico.Datastore == datastore.Etcd,
		Log:         slog.New(slog.NewTextHandler(stderr, nil))}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if opts.every == 0 {
		return once(ctx, s, stdout)
	}
	return loop(ctx, s, opts, stderr)
}

// kubeClient is the Kubernetes API's client: the kubeconfig the
// datastore flags resolved, --kubeconfig, else the pod's service
// account's ("": kubeconfig.Load reads it, bounded).
func kubeClient(paths ...string) (kubernetes.Interface, error) {
	path := cmp.Or(paths...)
	cfg, err := kubeconfig.Load(path)
	if err != nil {
		return nil, fmt.Errorf("the Kubernetes API (--kubeconfig %q): %w", path, err)
	}
	// client-go's default, 5 requests/s, makes the 1,000 pages of 500,000
	// pods take 200 s, longer than the period (docs/performance.md).
	cfg.QPS, cfg.Burst = datastore.KubeQPS, datastore.KubeBurst
	return kubernetes.NewForConfig(cfg)
}

// once runs one round and exits by it: gone-owner needs two rounds, so it
// is unknown here.
func once(ctx context.Context, s Sources, stdout io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	r := Round(ctx, s, nil)
	for _, f := range r.Findings {
		fmt.Fprintf(stdout, "%s %s %v: %s\n", f.Kind, f.Address, f.Pods, f.Why)
	}
	code := admin.ExitOK
	if len(r.Findings) > 0 {
		code = admin.ExitAttention
	}
	for _, k := range detect.Kinds {
		switch why := r.Unknown[k]; {
		case slices.Contains(r.NotApplicable, k):
			fmt.Fprintf(stdout, "%s not judged: %s\n", k, why)
		case k == detect.GoneOwner:
			fmt.Fprintf(stdout, "%s not judged: it takes rounds --leak-grace apart (--every)\n", k)
		case why != "":
			fmt.Fprintf(stdout, "%s unknown: %s\n", k, why)
			code = admin.ExitError
		}
	}
	return code
}

// loop runs a round every period until stopped, with the memory of
// gone owners across rounds; with a Lease, only while holding it.
func loop(ctx context.Context, s Sources, o *options, stderr io.Writer) int {
	reg := prometheus.NewRegistry()
	// Each of a round's two looks may take up to a period (500,000 pods
	// on the Kubernetes datastore take about one, docs/performance.md).
	// Beats come at each round's start and end: a round at its limit, the
	// pause between rounds, and a period of slack.
	roundLimit := 2*o.every + o.settle
	beat := metrics.NewHeartbeat(roundLimit + 2*o.every)
	var leading atomic.Bool
	if o.metricsAddr != "" {
		// A standby is alive while it waits for the Lease.
		alive := func() error {
			if o.Lease != "" && !leading.Load() {
				return nil
			}
			return beat.Alive()
		}
		bound, wait, err := metrics.ListenProbes(ctx, o.metricsAddr, "", reg, alive, nil)
		if err != nil {
			fmt.Fprintf(stderr, "safe-ipam detect: %v\n", err)
			return admin.ExitError
		}
		defer wait()
		fmt.Fprintf(stderr, "safe-ipam detect: serving metrics at %s\n", bound)
	}
	rounds := func(ctx context.Context) {
		if ctx.Err() != nil {
			return
		}
		leading.Store(true)
		defer leading.Store(false)
		beat.Beat()
		if o.metricsAddr != "" {
			// Only the instance that runs the rounds serves their
			// metrics: a standby's would read unknown for ever.
			s.Metrics = NewMetrics(reg)
			defer s.Metrics.Unregister(reg)
		}
		gone := detect.NewGone()
		for {
			rctx, cancel := context.WithTimeout(ctx, roundLimit)
			Round(rctx, s, gone)
			cancel()
			beat.Beat()
			select {
			case <-ctx.Done():
				return
			case <-time.After(o.every):
			}
		}
	}
	if o.Lease == "" {
		rounds(ctx)
		return admin.ExitOK
	}
	if err := o.election.run(ctx, s.Kube, s.Log, rounds); err != nil {
		fmt.Fprintf(stderr, "safe-ipam detect: %v\n", err)
		return admin.ExitError
	}
	return admin.ExitOK
}
