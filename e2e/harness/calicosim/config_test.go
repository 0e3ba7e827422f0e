package calicosim

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseNetConf(t *testing.T) {
	host, _ := os.Hostname()
	tests := []struct {
		name      string
		conf      string
		wantError string
		check     func(*NetConf) bool
	}{
		{
			name: "BRIEF minimal config",
			conf: `{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"calico-ipam","datastore_type":"etcdv3","etcd_endpoints":"http://127.0.0.1:2379","nodename":"node1","ipam":{"type":"calico-ipam"}}`,
			check: func(c *NetConf) bool {
				return c.Nodename == "node1" && slices.Equal(c.Endpoints(), []string{"http://127.0.0.1:2379"})
			},
		},
		{
			name: "defaults: etcdv3, host name, IPv4 only",
			conf: `{"name":"n","etcd_endpoints":"http://a:2379, http://b:2379,"}`,
			check: func(c *NetConf) bool {
				v4, _ := c.AssignIPv4()
				v6, _ := c.AssignIPv6()
				return c.DatastoreType == "etcdv3" && c.Nodename == host && v4 && !v6 && len(c.Endpoints()) == 2
			},
		},
		{
			name: "assign flags and pools",
			conf: `{"name":"n","etcd_endpoints":"e","ipam":{"assign_ipv4":"false","assign_ipv6":"true","ipv6_pools":["fd00:10:244::/48"]}}`,
			check: func(c *NetConf) bool {
				v4, _ := c.AssignIPv4()
				v6, _ := c.AssignIPv6()
				return !v4 && v6 && c.IPAM.IPv6Pools[0] == "fd00:10:244::/48"
			},
		},
		{
			name:  "datastore_type unset with etcd_endpoints means etcdv3",
			conf:  `{"name":"n","etcd_endpoints":"http://a:2379","nodename":"node1"}`,
			check: func(c *NetConf) bool { return c.DatastoreType == "etcdv3" },
		},
		{name: "datastore_type unset without etcd_endpoints means kubernetes", conf: `{"name":"n","nodename":"node1"}`,
			check: func(c *NetConf) bool { return c.DatastoreType == DatastoreKubernetes }},
		{name: "blank etcd_endpoints count as none", conf: `{"name":"n","nodename":"node1","etcd_endpoints":" , "}`,
			check: func(c *NetConf) bool { return c.DatastoreType == DatastoreKubernetes }},
		{name: "kubernetes datastore with its kubeconfig", conf: `{"name":"n","nodename":"node1","datastore_type":"kubernetes","kubernetes":{"kubeconfig":"/k"}}`,
			check: func(c *NetConf) bool {
				return c.DatastoreType == DatastoreKubernetes && c.Kubernetes.Kubeconfig == "/k"
			}},
		{name: "unknown datastore", conf: `{"name":"n","datastore_type":"consul"}`, wantError: `datastore_type "consul" is not supported by the simulator: only etcdv3 and kubernetes`},
		{name: "no endpoints", conf: `{"name":"n","datastore_type":"etcdv3"}`, wantError: "etcd_endpoints is required"},
		{name: "assign flag not a string", conf: `{"name":"n","etcd_endpoints":"e","ipam":{"assign_ipv4":true}}`, wantError: "parsing network config"},
		{name: "assign flag not true or false", conf: `{"name":"n","etcd_endpoints":"e","ipam":{"assign_ipv6":"yes"}}`, wantError: `ipam.assign_ipv6 must be "true" or "false"`},
		{name: "not JSON", conf: `{`, wantError: "parsing network config"},
	}
	noNodenameFile := filepath.Join(t.TempDir(), "nodename")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseNetConf([]byte(tt.conf), noNodenameFile)
			if refused(t, err, tt.wantError) {
				return
			}
			if !tt.check(c) {
				t.Errorf("unexpected config %+v", c)
			}
		})
	}
}

// TestNodenameResolution follows Calico's order: nodename, the file named
// by nodename_file (default: the default file), the deprecated hostname
// key, the OS host name.
func TestNodenameResolution(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	defaultFile := write("default-nodename", "node-default\n")
	ownFile := write("own-nodename", " node-file\n")
	blankFile := write("blank-nodename", "\n")
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name        string
		keys        map[string]string
		defaultFile string
		want        string
		wantError   string
	}{
		{"nodename wins", map[string]string{"nodename": "node-conf", "nodename_file": ownFile, "hostname": "node-h"}, defaultFile, "node-conf", ""},
		{"nodename_file before hostname", map[string]string{"nodename_file": ownFile, "hostname": "node-h"}, defaultFile, "node-file", ""},
		{"default file when nodename_file is unset", map[string]string{"hostname": "node-h"}, defaultFile, "node-default", ""},
		{"hostname key when the file is missing", map[string]string{"nodename_file": missing, "hostname": "node-h"}, defaultFile, "node-h", ""},
		{"hostname key when the file is blank", map[string]string{"nodename_file": blankFile, "hostname": "node-h"}, defaultFile, "node-h", ""},
		{"host name last, lowercased as Calico does", nil, missing, strings.ToLower(strings.TrimSpace(host)), ""},
		{"unreadable nodename_file", map[string]string{"nodename_file": dir}, missing, "", "nodename_file: reading " + dir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := map[string]string{"name": "n", "etcd_endpoints": "http://a:2379"}
			maps.Copy(conf, tt.keys)
			data, err := json.Marshal(conf)
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseNetConf(data, tt.defaultFile)
			if refused(t, err, tt.wantError) {
				return
			}
			if c.Nodename != tt.want {
				t.Errorf("nodename %q, want %q", c.Nodename, tt.want)
			}
		})
	}
}

func TestParsePodArgs(t *testing.T) {
	tests := []struct {
		args    string
		want    PodArgs
		wantErr bool
	}{
		{"", PodArgs{}, false},
		{"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc", PodArgs{"default", "web-0"}, false},
		{"K8S_POD_NAME=web-0;FOO=bar=baz", PodArgs{Name: "web-0"}, false},
		{"K8S_POD_NAME", PodArgs{}, true},
	}
	for _, tt := range tests {
		got, err := ParsePodArgs(tt.args)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParsePodArgs(%q) = %+v, %v; want %+v, error %v", tt.args, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestHandleNames(t *testing.T) {
	withPod := PodArgs{"default", "web-0"}
	half := PodArgs{Namespace: "default"}
	tests := []struct {
		mode     HandleMode
		pod      PodArgs
		wantAdd  string
		wantDels []string
	}{
		{ModernHandles, withPod, "net.cid", []string{"net.cid", "default.web-0"}},
		{ModernHandles, half, "net.cid", []string{"net.cid", "cid"}},
		{ModernHandles, PodArgs{}, "net.cid", []string{"net.cid", "cid"}},
		{LegacyHandles, withPod, "default.web-0", []string{"default.web-0"}},
		{LegacyHandles, half, "cid", []string{"cid"}},
	}
	for _, tt := range tests {
		if got := tt.mode.AddHandle("net", "cid", tt.pod); got != tt.wantAdd {
			t.Errorf("%s %+v: ADD handle %q, want %q", tt.mode, tt.pod, got, tt.wantAdd)
		}
		if got := tt.mode.DelHandles("net", "cid", tt.pod); !slices.Equal(got, tt.wantDels) {
			t.Errorf("%s %+v: DEL handles %q, want %q", tt.mode, tt.pod, got, tt.wantDels)
		}
	}
}

func TestParseHandleMode(t *testing.T) {
	tests := []struct {
		in      string
		want    HandleMode
		wantErr bool
	}{
		{"", ModernHandles, false},
		{"modern", ModernHandles, false},
		{"legacy", LegacyHandles, false},
		{"v2", "", true},
	}
	for _, tt := range tests {
		got, err := ParseHandleMode(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseHandleMode(%q) = %q, %v", tt.in, got, err)
		}
	}
}

// refused fails t unless err is as wanted: nil when want is "", else an
// error containing want. It reports whether the call was refused.
func refused(t *testing.T, err error, want string) bool {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want one containing %q", err, want)
	}
	return true
}
