package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// The three configurations: the delegate alone, and safe-ipam in front
// with each store. All are IPAM-only conflists, so only IPAM is measured.
const (
	Alone = "calico-ipam alone"
	File  = "safe-ipam + file store"
	Etcd  = "safe-ipam + etcd store"
)

var configs = []string{Alone, File, Etcd}

// The design floor: e2e/cmd/ipam-floor in front of the same delegate, the
// least an exec-per-call plugin with safe-ipam's two durable writes per
// call can cost, with each store. Measured beside configs for latency and
// churn.
const (
	FloorFile = "design floor + file writes"
	FloorEtcd = "design floor + etcd writes"
)

var floorConfigs = []string{FloorFile, FloorEtcd}

// cniBinary is the CNI binary a node of config runs: install puts the
// etcd build there when the node's records are in etcd, since the lean
// build would hand each call to it (one more exec).
func cniBinary(config string) string {
	if config == Etcd {
		return "safe-ipam-etcd"
	}
	return "safe-ipam"
}

// floorBinary is the design floor's build for a floor configuration: as
// the CNI binary's, with the etcd client only for the etcd store.
func floorBinary(config string) string {
	if config == FloorEtcd {
		return "ipam-floor-etcd"
	}
	return "ipam-floor"
}

// floorOf is the design floor of a safe-ipam configuration.
func floorOf(config string) string {
	if config == Etcd {
		return FloorEtcd
	}
	return FloorFile
}

// withFloors is configs and the design floors.
func withFloors() []string { return append(append([]string(nil), configs...), floorConfigs...) }

func (r *rig) plugin(config string) map[string]any {
	calicoKeys := map[string]any{"datastore_type": "etcdv3", "etcd_endpoints": r.etcd.Endpoint(), "nodename": "node1", "log_level": "warning"}
	p := map[string]any{"type": "calico-ipam", "ipam": map[string]any{"type": "calico-ipam"}}
	switch config {
	case FloorFile, FloorEtcd:
		floor := map[string]any{"store": "file", "dir": filepath.Join(r.dir, "floor-records")}
		if config == FloorEtcd {
			floor = map[string]any{"store": "etcd", "endpoints": []string{r.etcd.Endpoint()}, "prefix": "/safe-ipam-floor/v1"}
		}
		p = map[string]any{"type": floorBinary(config), "delegate": "calico-ipam", "floor": floor, "ipam": map[string]any{"type": "calico-ipam"}}
	case File, Etcd:
		store := map[string]any{"type": "file", "dir": filepath.Join(r.dir, "records")}
		if config == Etcd {
			store = map[string]any{"type": "etcd", "endpoints": []string{r.etcd.Endpoint()}, "prefix": "/safe-ipam/v1"}
		}
		p = map[string]any{"type": cniBinary(config), "ipam": map[string]any{"type": cniBinary(config), "delegate": map[string]any{"type": "calico-ipam"},
			"store": store, "cacheDir": filepath.Join(r.dir, "cache-safe-ipam"), "logFile": filepath.Join(r.dir, "safe-ipam.log"), "logLevel": "warn"}}
	}
	for k, v := range calicoKeys {
		p[k] = v
	}
	return p
}

func confName(config string) string {
	switch config {
	case File:
		return "bench-file"
	case Etcd:
		return "bench-etcd"
	case FloorFile:
		return "bench-floor-file"
	case FloorEtcd:
		return "bench-floor-etcd"
	}
	return "bench-alone"
}

func (r *rig) writeConflists() error {
	if err := os.MkdirAll(r.confDir, 0o755); err != nil {
		return err
	}
	for _, c := range withFloors() {
		list := map[string]any{"cniVersion": "1.0.0", "name": confName(c), "plugins": []any{r.plugin(c)}}
		data, err := json.Marshal(list)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(r.confDir, confName(c)+".conflist"), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (r *rig) conflist(config string) (*libcni.NetworkConfigList, error) {
	return libcni.ConfListFromFile(filepath.Join(r.confDir, confName(config)+".conflist"))
}

// pod is one StatefulSet-style attachment.
type pod struct {
	containerID, name string
}

// runtime is what a Kubernetes runtime passes libcni. libcni joins Args
// into CNI_ARGS as they are, and calico-ipam refuses keys it does not know
// unless IgnoreUnknown=1 comes along, so runtimes send it first.
func (p pod) runtime() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: p.containerID,
		NetNS:       "/var/run/netns/safe-ipam-bench-none", // IPAM never enters it
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", benchNamespace}, {"K8S_POD_NAME", p.name}, {"K8S_POD_INFRA_CONTAINER_ID", p.containerID},
		},
	}
}

func (r *rig) add(ctx context.Context, list *libcni.NetworkConfigList, p pod) error {
	_, err := r.addAddrs(ctx, list, p)
	return err
}

// addAddrs runs ADD and returns the addresses of its result.
func (r *rig) addAddrs(ctx context.Context, list *libcni.NetworkConfigList, p pod) ([]string, error) {
	res, err := r.cni.AddNetworkList(ctx, list, p.runtime())
	if err != nil {
		return nil, fmt.Errorf("ADD %s: %w", p.containerID, err)
	}
	r100, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("ADD %s result: %w", p.containerID, err)
	}
	addrs := make([]string, len(r100.IPs))
	for i, ip := range r100.IPs {
		addrs[i] = ip.Address.IP.String()
	}
	return addrs, nil
}

func (r *rig) del(ctx context.Context, list *libcni.NetworkConfigList, p pod) error {
	if err := r.cni.DelNetworkList(ctx, list, p.runtime()); err != nil {
		return fmt.Errorf("DEL %s: %w", p.containerID, err)
	}
	return nil
}

// do runs ADD or DEL.
func (r *rig) do(ctx context.Context, op string, list *libcni.NetworkConfigList, p pod) error {
	if op == "ADD" {
		return r.add(ctx, list, p)
	}
	return r.del(ctx, list, p)
}
