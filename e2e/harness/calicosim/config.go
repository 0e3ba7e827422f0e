package calicosim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// DefaultNodenameFile is where calico-node writes the name it registered
// the node under; calico-ipam reads it when nodename_file is unset.
const DefaultNodenameFile = "/var/lib/calico/nodename"

// NetConf is the part of the network config calico-ipam reads. It reads
// the whole plugin config, not only the ipam section.
type NetConf struct {
	CNIVersion     string   `json:"cniVersion"`
	Name           string   `json:"name"`
	DatastoreType  string   `json:"datastore_type"`
	EtcdEndpoints  string   `json:"etcd_endpoints"`
	EtcdKeyFile    string   `json:"etcd_key_file"`
	EtcdCertFile   string   `json:"etcd_cert_file"`
	EtcdCACertFile string   `json:"etcd_ca_cert_file"`
	Nodename       string   `json:"nodename"`
	NodenameFile   string   `json:"nodename_file"`
	Hostname       string   `json:"hostname"` // deprecated spelling of nodename, still read
	LogLevel       string   `json:"log_level"`
	LogFilePath    string   `json:"log_file_path"`
	Kubernetes     KubeConf `json:"kubernetes"`
	IPAM           IPAMConf `json:"ipam"`
}

// Datastore types calico-ipam knows.
const (
	DatastoreEtcd       = "etcdv3"
	DatastoreKubernetes = "kubernetes"
)

// KubeConf is the kubernetes section: how to reach the apiserver of the
// Kubernetes datastore. Without a kubeconfig, calico-ipam uses the pod's
// service account (in-cluster config).
type KubeConf struct {
	Kubeconfig string `json:"kubeconfig"`
}

// IPAMConf is the ipam section. assign_ipv4/assign_ipv6 are strings in
// Calico's config, "true" or "false".
type IPAMConf struct {
	Type       string   `json:"type"`
	IPv4Pools  []string `json:"ipv4_pools"`
	IPv6Pools  []string `json:"ipv6_pools"`
	AssignIPv4 *string  `json:"assign_ipv4"`
	AssignIPv6 *string  `json:"assign_ipv6"`
}

// ParseNetConf decodes and checks a config, filling in what Calico infers:
// the datastore and the node name. defaultNodenameFile stands for
// DefaultNodenameFile, so tests need not touch the host's.
func ParseNetConf(stdin []byte, defaultNodenameFile string) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("parsing network config: %w", err)
	}
	if err := c.inferDatastore(); err != nil {
		return nil, err
	}
	if err := c.resolveNodename(defaultNodenameFile); err != nil {
		return nil, err
	}
	if _, err := c.AssignIPv4(); err != nil {
		return nil, err
	}
	if _, err := c.AssignIPv6(); err != nil {
		return nil, err
	}
	return &c, nil
}

// inferDatastore fills in datastore_type as Calico does when it is unset:
// etcdv3 when etcd_endpoints is set, else kubernetes (Calico's own
// calico-etcd.yaml sets no datastore_type).
func (c *NetConf) inferDatastore() error {
	hasEndpoints := len(c.Endpoints()) > 0
	switch {
	case c.DatastoreType == "" && hasEndpoints:
		c.DatastoreType = DatastoreEtcd
	case c.DatastoreType == "":
		c.DatastoreType = DatastoreKubernetes
	case c.DatastoreType == DatastoreKubernetes:
	case c.DatastoreType != DatastoreEtcd:
		return fmt.Errorf("datastore_type %q is not supported by the simulator: only %s and %s", c.DatastoreType, DatastoreEtcd, DatastoreKubernetes)
	case !hasEndpoints:
		return errors.New("etcd_endpoints is required with datastore_type etcdv3")
	}
	return nil
}

// DatastoreOf returns the datastore a network config makes calico-ipam
// use, etcdv3 or kubernetes, as the simulator infers it.
func DatastoreOf(stdin []byte) (string, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return "", fmt.Errorf("parsing network config: %w", err)
	}
	if err := c.inferDatastore(); err != nil {
		return "", err
	}
	return c.DatastoreType, nil
}

// resolveNodename picks the node name in Calico's order: nodename, the
// content of nodename_file (default defaultFile), the deprecated hostname
// key, then the OS host name.
func (c *NetConf) resolveNodename(defaultFile string) error {
	if c.Nodename != "" {
		return nil
	}
	path := c.NodenameFile
	if path == "" {
		path = defaultFile
	}
	name, err := readNodenameFile(path)
	if err != nil {
		return err
	}
	if name == "" {
		name = c.Hostname
	}
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return fmt.Errorf("nodename unset, no %s and host name unknown: %w", path, err)
		}
		// Calico lowercases the host name so that it is valid in its API.
		name = strings.ToLower(strings.TrimSpace(name))
	}
	c.Nodename = name
	return nil
}

// readNodenameFile returns the trimmed content of path, or "" when it does
// not exist: calico-node writes it only once it has started.
func readNodenameFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("nodename_file: reading %s: %w", path, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// Endpoints splits etcd_endpoints on commas.
func (c *NetConf) Endpoints() []string {
	var eps []string
	for _, ep := range strings.Split(c.EtcdEndpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return eps
}

// AssignIPv4 reports whether to assign an IPv4 address (default yes).
func (c *NetConf) AssignIPv4() (bool, error) {
	return parseAssign("assign_ipv4", c.IPAM.AssignIPv4, true)
}

// AssignIPv6 reports whether to assign an IPv6 address (default no).
func (c *NetConf) AssignIPv6() (bool, error) {
	return parseAssign("assign_ipv6", c.IPAM.AssignIPv6, false)
}

func parseAssign(field string, v *string, def bool) (bool, error) {
	if v == nil {
		return def, nil
	}
	switch *v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("ipam.%s must be \"true\" or \"false\", not %q", field, *v)
}
