package calicosim

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// NetConf is the part of the network config calico-ipam reads. It reads
// the whole plugin config, not only the ipam section. log_file_path is
// accepted but unused: the simulator logs to stderr only.
type NetConf struct {
	CNIVersion     string   `json:"cniVersion"`
	Name           string   `json:"name"`
	DatastoreType  string   `json:"datastore_type"`
	EtcdEndpoints  string   `json:"etcd_endpoints"`
	EtcdKeyFile    string   `json:"etcd_key_file"`
	EtcdCertFile   string   `json:"etcd_cert_file"`
	EtcdCACertFile string   `json:"etcd_ca_cert_file"`
	Nodename       string   `json:"nodename"`
	LogLevel       string   `json:"log_level"`
	LogFilePath    string   `json:"log_file_path"`
	IPAM           IPAMConf `json:"ipam"`
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

// ParseNetConf decodes and checks a config, filling in defaults: the
// nodename is the host name unless set.
func ParseNetConf(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, fmt.Errorf("parsing network config: %w", err)
	}
	// An unset datastore means etcdv3, Calico's default.
	if c.DatastoreType == "" {
		c.DatastoreType = "etcdv3"
	}
	if c.DatastoreType != "etcdv3" {
		return nil, fmt.Errorf("datastore_type %q is not supported by the simulator: only etcdv3", c.DatastoreType)
	}
	if len(c.Endpoints()) == 0 {
		return nil, fmt.Errorf("etcd_endpoints is required with datastore_type etcdv3")
	}
	if c.Nodename == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("nodename unset and host name unknown: %w", err)
		}
		c.Nodename = host
	}
	if _, err := c.AssignIPv4(); err != nil {
		return nil, err
	}
	if _, err := c.AssignIPv6(); err != nil {
		return nil, err
	}
	return &c, nil
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
