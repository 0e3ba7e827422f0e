package testbed

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Network describes one CNI network as a node's config directory holds
// it: ptp with Calico's IPAM (alone, or behind safe-ipam), then loopback.
type Network struct {
	Name       string
	CNIVersion string
	// Node is Calico's nodename; it decides which blocks the node claims.
	Node string
	// Datastore is Calico's datastore, which calico-ipam is pointed at.
	Datastore Datastore
	// Pools restricts calico-ipam to these IPPool CIDRs (ipam.ipv4_pools).
	Pools []string
	// Safe puts safe-ipam in front of calico-ipam; nil runs calico-ipam
	// alone, which is the control.
	Safe *SafeConfig
	// CalicoLog is calico-ipam's log_file_path, if set.
	CalicoLog string
	// Kubeconfig, when set, is kubernetes.kubeconfig, through which
	// calico-ipam looks KubeVirt's pods and VMs up (with any datastore).
	Kubeconfig string
}

// SafeConfig is safe-ipam's part of the ipam section.
type SafeConfig struct {
	// DelegateHandles is "container" or "pod" (for Calico 2.x handles).
	DelegateHandles string
	Store           Store
	// StateDir holds its VERSION cache and log.
	StateDir string
	// GCGracePeriod is gcGracePeriod; "" is 0s: tests decide what is
	// stale through the valid-attachments list alone.
	GCGracePeriod string
}

// Store is where safe-ipam keeps its records.
type Store struct {
	Type      string   `json:"type"`
	Dir       string   `json:"dir,omitempty"`
	Endpoints []string `json:"endpoints,omitempty"`
	Prefix    string   `json:"prefix,omitempty"`
}

// FileStore keeps records in dir, node-local.
func FileStore(dir string) Store { return Store{Type: "file", Dir: dir} }

// EtcdStore keeps records in etcd under prefix.
func EtcdStore(endpoint, prefix string) Store {
	return Store{Type: "etcd", Endpoints: []string{endpoint}, Prefix: prefix}
}

// Label names who allocates on this network, for messages and tables.
func (n Network) Label() string {
	if n.Safe == nil {
		return "calico-ipam alone"
	}
	return "safe-ipam in front of calico-ipam"
}

// PluginConfig is the interface plugin's config. calico-ipam reads the
// whole of it, so Calico's datastore keys sit at the top level.
func (n Network) PluginConfig() map[string]any {
	conf := map[string]any{
		"type":     PTP,
		"nodename": n.Node,
		"ipam":     n.ipam(),
	}
	if n.Kubeconfig != "" {
		conf["kubernetes"] = map[string]any{"kubeconfig": n.Kubeconfig}
	}
	n.Datastore.netConf(conf)
	if n.CalicoLog != "" {
		conf["log_file_path"] = n.CalicoLog
	}
	return conf
}

func (n Network) ipam() map[string]any {
	ipam := map[string]any{
		"type":       LinkLocalGateway,
		"wraps":      CalicoIPAM,
		"ipv4_pools": n.Pools,
	}
	if n.Safe == nil {
		return ipam
	}
	ipam["wraps"] = SafeIPAM
	ipam["delegate"] = map[string]any{"type": CalicoIPAM}
	ipam["delegateHandles"] = n.Safe.DelegateHandles
	ipam["store"] = n.Safe.Store
	ipam["cacheDir"] = filepath.Join(n.Safe.StateDir, "cache")
	ipam["logFile"] = filepath.Join(n.Safe.StateDir, "safe-ipam.log")
	ipam["logLevel"] = "debug"
	ipam["gcGracePeriod"] = "0s"
	if n.Safe.GCGracePeriod != "" {
		ipam["gcGracePeriod"] = n.Safe.GCGracePeriod
	}
	return ipam
}

// Conflist is the network's .conflist document.
func (n Network) Conflist() ([]byte, error) {
	list := map[string]any{
		"cniVersion": n.CNIVersion,
		"name":       n.Name,
		"plugins":    []any{n.PluginConfig(), map[string]any{"type": Loopback}},
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding conflist %s: %w", n.Name, err)
	}
	return b, nil
}

// WriteConflist writes the network into dir as <name>.conflist.
func (n Network) WriteConflist(dir string) error {
	b, err := n.Conflist()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating config dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, n.Name+".conflist"), b, 0o644); err != nil {
		return fmt.Errorf("writing conflist %s: %w", n.Name, err)
	}
	return nil
}

// NodeFile writes one of the files a config names (a nodename, a token, a
// CA, a kubeconfig, a conflist) into dir, readable by its owner only, and
// returns its path.
func NodeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
