package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
)

// The configurations on Calico's Kubernetes datastore.
const (
	KDDAlone  = "calico-ipam alone (KDD)"
	KDDFile   = "safe-ipam + file store (KDD, no claims served)"
	KDDClaims = "safe-ipam + file store + claims (KDD)"
)

// kddAloneBesideClaims is calico-ipam alone in the phase with claims.
const kddAloneBesideClaims = KDDAlone + " beside claims"

// claimsCRD is safe-ipam's AddressClaim definition and its role, in the
// repository this file is in.
func claimsCRD() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", "deploy", "safe-ipam-claims.yaml")
}

// measureClaims times ADD and DEL on Calico's Kubernetes datastore, one
// API server (its etcd on the same cores): calico-ipam alone, and
// safe-ipam with the file store, first while no AddressClaims are served
// (each node fences its own records), then with them (a create per
// address on ADD, a read and a delete on DEL). The CRD is the cluster's,
// so the two phases run one after the other, each against calico-ipam
// alone rotated with it; each ratio is to the alone of its own phase.
func (r *rig) measureClaims(ctx context.Context, res *Results) error {
	srv, err := kubetest.New(filepath.Join(r.dir, "kube-claims"))
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Namespace(benchNamespace); err != nil {
		return err
	}
	if err := srv.Apply(calicodata.Path(calicodata.CRDs)); err != nil {
		return err
	}
	if err := calicosim.SeedKubeIPPool(ctx, srv.Config(), "default-ipv4-ippool", "10.96.0.0/12", 26); err != nil {
		return err
	}
	if err := calicosim.SeedKubeNode(ctx, srv.Config(), "node1"); err != nil {
		return err
	}
	phases := []struct {
		safe, alone string
		apply       bool
	}{{KDDFile, KDDAlone, false}, {KDDClaims, kddAloneBesideClaims, true}}
	for _, ph := range phases {
		if ph.apply {
			if err := srv.Apply(claimsCRD()); err != nil {
				return err
			}
		}
		before, err := claimRequests(ctx, srv)
		if err != nil {
			return err
		}
		samples, err := r.kddSamples(ctx, srv.Kubeconfig, []string{ph.alone, ph.safe})
		if err != nil {
			return err
		}
		after, err := claimRequests(ctx, srv)
		if err != nil {
			return err
		}
		if ph.apply {
			res.ClaimRequestsPerPod = (after - before) / float64(r.kddRuns())
			if res.ClaimRequestsPerPod < 1 {
				return fmt.Errorf("the phase with claims served made %.1f requests on AddressClaims per pod: it measured no claims", res.ClaimRequestsPerPod)
			}
		}
		for _, c := range []string{ph.alone, ph.safe} {
			for _, op := range []string{"ADD", "DEL"} {
				p50, p95, p99 := percentiles(samples[c][op])
				res.Latency = append(res.Latency, Latency{Config: c, Op: op, P50: p50, P95: p95, P99: p99, N: len(samples[c][op])})
			}
		}
		for _, op := range []string{"ADD", "DEL"} {
			res.Ratios[fmt.Sprintf("%s %s p50", ph.safe, op)] = res.latency(ph.safe, op).P50 / res.latency(ph.alone, op).P50
		}
	}
	return nil
}

// claimRequests is how many requests on AddressClaims the API server has
// served, as its own metrics count them (apiserver_request_total).
func claimRequests(ctx context.Context, srv *kubetest.Server) (float64, error) {
	raw, err := srv.Client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	n := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="addressclaims"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("the API server's metric %q: %w", line, err)
		}
		n += v
	}
	return n, nil
}

// kddSamples runs ADD then DEL of new pods, rotating over configs.
func (r *rig) kddSamples(ctx context.Context, kubeconfig string, configs []string) (map[string]map[string][]time.Duration, error) {
	lists := map[string]*libcni.NetworkConfigList{}
	samples := map[string]map[string][]time.Duration{}
	for _, c := range configs {
		list, err := r.kddConflist(c, kubeconfig)
		if err != nil {
			return nil, err
		}
		lists[c], samples[c] = list, map[string][]time.Duration{}
	}
	for i := 0; i < r.kddRuns(); i++ {
		for _, c := range configs {
			p := pod{containerID: fmt.Sprintf("%s-%d", lists[c].Name, i), name: fmt.Sprintf("kdd-%d", i)}
			for _, op := range []string{"ADD", "DEL"} {
				start := time.Now()
				if err := r.do(ctx, op, lists[c], p); err != nil {
					return nil, fmt.Errorf("%s on the Kubernetes datastore (%s): %w", op, c, err)
				}
				samples[c][op] = append(samples[c][op], time.Since(start))
			}
		}
	}
	return samples, nil
}

// kddRuns: every pod writes Calico's objects through the API server, so
// fewer samples than measureLatency's, and enough for the percentiles.
func (r *rig) kddRuns() int {
	return min(max(r.opts.Samples/2, 10), 100)
}

// kddConflist is config's conflist with Calico's keys for the Kubernetes
// datastore.
func (r *rig) kddConflist(config, kubeconfig string) (*libcni.NetworkConfigList, error) {
	base := Alone
	if config == KDDFile || config == KDDClaims {
		base = File
	}
	p := r.plugin(base)
	delete(p, "etcd_endpoints")
	p["datastore_type"] = "kubernetes"
	p["kubernetes"] = map[string]any{"kubeconfig": kubeconfig}
	name := map[string]string{KDDAlone: "bench-kdd-alone", kddAloneBesideClaims: "bench-kdd-alone-claims",
		KDDFile: "bench-kdd-file", KDDClaims: "bench-kdd-claims"}[config]
	if ipam, ok := p["ipam"].(map[string]any); ok && base == File {
		ipam["store"] = map[string]any{"type": "file", "dir": filepath.Join(r.dir, "records-kdd")}
		// A cache of its own: the phase without claims notes them not
		// served there, and the node's calls then try none for a while.
		ipam["cacheDir"] = filepath.Join(r.dir, "cache-"+name)
	}
	return r.writeList(name, p)
}
