package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
)

// measureKubeVirt times ADD and DEL of KubeVirt virt-launcher pods, whose
// addresses calico-ipam keeps under their VM's handle: calico-ipam looks
// the pod and its VM up in the API, and safe-ipam reads which handle
// holds the address from Calico's data. Each pod's VM is deleted before
// its DEL, so the DEL releases the address. The configurations rotate,
// as in measureLatency; ordinary pods pay none of this (the ADD of a pod
// not named virt-launcher-* reads nothing more).
func (r *rig) measureKubeVirt(ctx context.Context, res *Results) error {
	srv, err := kubetest.New(filepath.Join(r.dir, "kube"))
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Namespace(benchNamespace); err != nil {
		return err
	}
	if err := calicosim.InstallKubeVirtCRDs(ctx, srv.Config()); err != nil {
		return err
	}
	dyn, err := calicosim.NewDynamic(srv.Config())
	if err != nil {
		return err
	}
	lists := map[string]*libcni.NetworkConfigList{}
	for _, c := range configs {
		if lists[c], err = r.vmConflist(c, srv.Kubeconfig); err != nil {
			return err
		}
	}
	samples := map[string]map[string][]time.Duration{}
	for i := 0; i < r.vmSamples(); i++ {
		for _, c := range configs {
			if samples[c] == nil {
				samples[c] = map[string][]time.Duration{}
			}
			vm, err := calicosim.SeedVM(ctx, dyn, benchNamespace, fmt.Sprintf("vm-%s-%d", confName(c), i), false)
			if err != nil {
				return err
			}
			p := pod{containerID: fmt.Sprintf("vm-%s-%d", confName(c), i), name: "virt-launcher-" + vm.Name + "-x"}
			if _, err := calicosim.SeedVirtLauncher(ctx, dyn, vm, p.name, ""); err != nil {
				return err
			}
			for _, op := range []string{"ADD", "DEL"} {
				if op == "DEL" {
					if err := calicosim.DeleteVM(ctx, dyn, vm); err != nil {
						return err
					}
				}
				start := time.Now()
				if err := r.do(ctx, op, lists[c], p); err != nil {
					return fmt.Errorf("%s of a VM pod (%s): %w", op, c, err)
				}
				samples[c][op] = append(samples[c][op], time.Since(start))
			}
		}
	}
	for _, c := range configs {
		for _, op := range []string{"ADD", "DEL"} {
			p50, p95, p99 := percentiles(samples[c][op])
			res.Latency = append(res.Latency, Latency{Config: c + vmSuffix, Op: op, P50: p50, P95: p95, P99: p99, N: len(samples[c][op])})
		}
	}
	for _, c := range []string{File, Etcd} {
		for _, op := range []string{"ADD", "DEL"} {
			res.Ratios[fmt.Sprintf("%s%s %s p50", c, vmSuffix, op)] = res.latency(c+vmSuffix, op).P50 / res.latency(Alone+vmSuffix, op).P50
		}
	}
	return nil
}

// vmSuffix marks the KubeVirt configurations in the results.
const vmSuffix = " (KubeVirt VM pods)"

// benchNamespace is the pods' namespace (pod.runtime passes it).
const benchNamespace = "bench"

// vmSamples: each sample creates objects in the API, so fewer than
// measureLatency's, and at least a few for the percentiles.
func (r *rig) vmSamples() int {
	return min(max(r.opts.Samples/4, 5), 50)
}

// vmConflist is config's conflist with the kubeconfig calico-ipam looks
// VMs up through.
func (r *rig) vmConflist(config, kubeconfig string) (*libcni.NetworkConfigList, error) {
	p := r.plugin(config)
	p["kubernetes"] = map[string]any{"kubeconfig": kubeconfig}
	return r.writeList(confName(config)+"-vm", p)
}

// writeList writes a conflist of the one plugin p, named name, and reads
// it as libcni does.
func (r *rig) writeList(name string, p map[string]any) (*libcni.NetworkConfigList, error) {
	data, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{p}})
	if err != nil {
		return nil, err
	}
	path := filepath.Join(r.dir, name+".conflist")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	return libcni.ConfListFromFile(path)
}
