package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Calico datastore types, as calico-ipam names them.
const (
	DatastoreEtcd       = "etcdv3"
	DatastoreKubernetes = "kubernetes"
)

// CalicoNodenameFile is where calico-node writes the name it registered
// the node under; calico-ipam reads it when the config has no nodename
// and no nodename_file.
const CalicoNodenameFile = "/var/lib/calico/nodename"

// CalicoSettings is what calico-ipam reads from the top level of the plugin
// config to find its datastore and its node. safe-ipam reads the same keys
// the same way, so that its records, GC and audits name the node and the
// etcd that Calico uses.
type CalicoSettings struct {
	DatastoreType  string `json:"datastore_type"`
	EtcdEndpoints  string `json:"etcd_endpoints"`
	EtcdCertFile   string `json:"etcd_cert_file"`
	EtcdKeyFile    string `json:"etcd_key_file"`
	EtcdCACertFile string `json:"etcd_ca_cert_file"`
	Nodename       string `json:"nodename"`
	NodenameFile   string `json:"nodename_file"`
	Hostname       string `json:"hostname"` // deprecated by Calico, still read
	// Kubeconfig is kubernetes.kubeconfig: the API server calico-ipam
	// reaches with the kubernetes datastore.
	Kubeconfig string `json:"-"`
}

// ReadCalico decodes the Calico keys of a plugin config, naming the key
// whose value has the wrong type (calico-ipam would refuse it too).
func ReadCalico(top map[string]json.RawMessage) (CalicoSettings, error) {
	var c CalicoSettings
	for key, dst := range map[string]*string{
		"datastore_type": &c.DatastoreType, "etcd_endpoints": &c.EtcdEndpoints,
		calicoTLSKeys.cert: &c.EtcdCertFile, calicoTLSKeys.key: &c.EtcdKeyFile, calicoTLSKeys.ca: &c.EtcdCACertFile,
		"nodename": &c.Nodename, "nodename_file": &c.NodenameFile, "hostname": &c.Hostname,
	} {
		if err := field(top, key, dst); err != nil {
			return c, err
		}
	}
	var k8s map[string]json.RawMessage
	if err := field(top, "kubernetes", &k8s); err != nil {
		return c, err
	}
	return c, field(k8s, "kubeconfig", &c.Kubeconfig)
}

// Datastore is the datastore calico-ipam uses: datastore_type when set;
// otherwise etcdv3 when etcd_endpoints is set, else kubernetes. Calico's
// own calico-etcd.yaml relies on this: its config has no datastore_type.
func (c CalicoSettings) Datastore() string {
	switch {
	case c.DatastoreType != "":
		return c.DatastoreType
	case len(c.Endpoints()) > 0:
		return DatastoreEtcd
	}
	return DatastoreKubernetes
}

// Endpoints splits etcd_endpoints on commas.
func (c CalicoSettings) Endpoints() []string {
	var eps []string
	for _, e := range strings.Split(c.EtcdEndpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// Node is the node name as calico-ipam resolves it: nodename; else the
// file nodename_file names (default CalicoNodenameFile), when it exists
// and is not empty; else the deprecated hostname key; else the OS host
// name, trimmed and lowercased. A record, GC or liveness judgment under
// another name than Calico's would be about the wrong node.
func (c CalicoSettings) Node() (string, error) {
	node, from, err := c.resolveNode()
	if err != nil {
		return "", invalid(from, err.Error())
	}
	if err := record.ValidateNode(node); err != nil {
		if file, ok := c.nodenameFileOf(from); ok {
			// A file's bytes are never echoed: it may be a key named by
			// mistake, and this error reaches logs and events.
			return "", invalid(from, fmt.Sprintf("%s does not hold a node name (%d bytes; a node name is one line of letters, digits, '.', '-' and '_')", file, len(node)))
		}
		return "", invalid(from, fmt.Sprintf("%q: %v", node, err))
	}
	return node, nil
}

// nodenameFileOf says which file a name read from setting came from.
func (c CalicoSettings) nodenameFileOf(from string) (string, bool) {
	switch {
	case from == "nodename_file":
		return c.NodenameFile, true
	case strings.HasPrefix(from, "nodename_file "):
		return CalicoNodenameFile, true
	}
	return "", false
}

// resolveNode returns the name and the setting it came from.
func (c CalicoSettings) resolveNode() (node, from string, err error) {
	if c.Nodename != "" {
		return c.Nodename, "nodename", nil
	}
	file, from := c.NodenameFile, "nodename_file"
	if file == "" {
		file, from = CalicoNodenameFile, "nodename_file (default "+CalicoNodenameFile+")"
	}
	data, err := bounded.Read(file, bounded.Name)
	switch {
	case err == nil && strings.TrimSpace(string(data)) != "":
		return strings.TrimSpace(string(data)), from, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		// A file that exists but cannot be read is not "no file": falling
		// back could name another node than the one calico-node registered.
		return "", from, fmt.Errorf("reading %w", err)
	}
	if c.Hostname != "" {
		return c.Hostname, "hostname", nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", "nodename", fmt.Errorf("no nodename, nodename_file or hostname, and the OS host name is unknown: %v", err)
	}
	return strings.ToLower(strings.TrimSpace(host)), "nodename (OS host name)", nil
}
