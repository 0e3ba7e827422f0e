package testbed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
)

// ManifestPath is the project's rendering of Calico's manifest for an
// etcd datastore: calico-config and calico-node's scheduling.
func ManifestPath() string { return calicodata.Path(calicodata.Manifest) }

// CalicoNetworkTemplate is the cni_network_config of the calico-config
// ConfigMap in Calico's manifest, as calico-node's installer gets it.
func CalicoNetworkTemplate() (string, error) {
	path := ManifestPath()
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var cm struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		}
		if yaml.Unmarshal(doc, &cm) != nil || cm.Kind != "ConfigMap" || cm.Metadata.Name != "calico-config" {
			continue
		}
		if t := cm.Data["cni_network_config"]; t != "" {
			return t, nil
		}
	}
	return "", fmt.Errorf("%s has no calico-config ConfigMap with a cni_network_config", path)
}

var placeholder = regexp.MustCompile(`__[A-Z0-9_]+__`)

// RenderCalicoNetwork replaces the template's __PLACEHOLDERS__ as
// calico-node's installer does, from values (ETCD_ENDPOINTS, CNI_MTU, ...).
// A placeholder without a value is an error, so a new one in Calico's
// template is noticed.
func RenderCalicoNetwork(template string, values map[string]string) ([]byte, error) {
	var missing []string
	out := placeholder.ReplaceAllStringFunc(template, func(p string) string {
		v, ok := values[strings.Trim(p, "_")]
		if !ok {
			missing = append(missing, p)
		}
		return v
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("no value for Calico's placeholders %v", missing)
	}
	return []byte(out), nil
}

// CalicoDefaults are values for every placeholder of Calico's template,
// as a node without etcd TLS gets them.
func CalicoDefaults(etcdEndpoints string) map[string]string {
	return map[string]string{
		"ETCD_ENDPOINTS":          etcdEndpoints,
		"ETCD_KEY_FILE":           "",
		"ETCD_CERT_FILE":          "",
		"ETCD_CA_CERT_FILE":       "",
		"CNI_MTU":                 "1440",
		"KUBECONFIG_FILEPATH":     "/etc/cni/net.d/calico-kubeconfig",
		"KUBERNETES_NODE_NAME":    "node1",
		"KUBERNETES_SERVICE_HOST": "10.96.0.1",
		"KUBERNETES_SERVICE_PORT": "443",
		"SERVICEACCOUNT_TOKEN":    "",
	}
}

// CalicoInstaller does what calico-node's install-cni init container does
// on every start of calico-node: it copies Calico's one multi-call binary
// as both calico and calico-ipam, and writes the rendered network config
// in place with os.WriteFile, mode 0600.
type CalicoInstaller struct {
	// Binary is Calico's binary (in tests, the multi-call simulator).
	Binary string
	// Main, when set, is installed as calico instead of Binary (see
	// Binaries.MainPlugin).
	Main    string
	BinDir  string
	ConfDir string
	// ConfName is CNI_CONF_NAME, 10-calico.conflist by default.
	ConfName string
	// Network is the rendered cni_network_config.
	Network []byte
}

// Run installs Calico once, as one calico-node start does: with
// $CALICO_INSTALL, Calico's own installer does (runReal).
func (c CalicoInstaller) Run() error {
	if path := os.Getenv(EnvCalicoInstall); path != "" {
		return c.runReal(path)
	}
	main := c.Main
	if main == "" {
		main = c.Binary
	}
	for name, bin := range map[string]string{"calico": main, "calico-ipam": c.Binary} {
		if err := copyBinary(bin, filepath.Join(c.BinDir, name)); err != nil {
			return err
		}
	}
	name := c.ConfName
	if name == "" {
		name = "10-calico.conflist"
	}
	if err := os.WriteFile(filepath.Join(c.ConfDir, name), c.Network, 0o600); err != nil {
		return fmt.Errorf("writing Calico's network config: %w", err)
	}
	return nil
}

// copyBinary replaces dst with a copy of src through a temp file and a
// rename, so a runtime never runs a half-copied binary.
func copyBinary(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("reading Calico's binary: %w", err)
	}
	tmp := dst + ".calico-tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return fmt.Errorf("copying Calico's binary to %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("copying Calico's binary to %s: %w", dst, err)
	}
	return nil
}

// CalicoNodeName is the node name calico-ipam infers from the first
// plugin of the network config list at path (as the simulator models it).
func CalicoNodeName(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var list struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil || len(list.Plugins) == 0 {
		return "", fmt.Errorf("%s: not a network config list with plugins: %v", path, err)
	}
	conf, err := calicosim.ParseNetConf(list.Plugins[0], calicosim.DefaultNodenameFile)
	if err != nil {
		return "", err
	}
	return conf.Nodename, nil
}
