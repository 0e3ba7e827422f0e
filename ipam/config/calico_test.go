package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

func TestDatastoreInference(t *testing.T) {
	tests := []struct {
		name string
		top  string
		want string
	}{
		{"endpoints without datastore_type, as calico-etcd.yaml renders it", `"etcd_endpoints":"https://10.0.0.1:2379"`, DatastoreEtcd},
		{"explicit etcdv3", `"datastore_type":"etcdv3","etcd_endpoints":"http://a:1"`, DatastoreEtcd},
		{"no endpoints", `"type":"calico"`, DatastoreKubernetes},
		{"blank endpoints", `"etcd_endpoints":" , "`, DatastoreKubernetes},
		{"explicit kubernetes wins over endpoints", `"datastore_type":"kubernetes","etcd_endpoints":"http://a:1"`, DatastoreKubernetes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"n",` + tt.top + `,"ipam":{"type":"safe-ipam"}}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Datastore(); got != tt.want {
				t.Errorf("Datastore() = %q, want %q", got, tt.want)
			}
			wantStore := StoreFile
			if tt.want == DatastoreEtcd {
				wantStore = StoreEtcd
			}
			if c.Store.Type != wantStore {
				t.Errorf("default store = %q, want %q", c.Store.Type, wantStore)
			}
		})
	}
}

func TestNodeResolution(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string { return testbed.NodeFile(t, dir, name, content) }
	named := write("nodename", "node-from-file\n")
	blank := write("blank", " \n")
	missing := filepath.Join(dir, "missing")
	const secret = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
	key := write("key.pem", "-----BEGIN PRIVATE KEY-----\n"+secret+"\n-----END PRIVATE KEY-----\n")
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		calico    CalicoSettings
		want      string
		wantField string // set when resolution must fail, naming this setting
	}{
		{"nodename wins", CalicoSettings{Nodename: "n1", NodenameFile: named, Hostname: "h"}, "n1", ""},
		{"then nodename_file", CalicoSettings{NodenameFile: named, Hostname: "h"}, "node-from-file", ""},
		{"a missing file falls through to hostname", CalicoSettings{NodenameFile: missing, Hostname: "h"}, "h", ""},
		{"a blank file falls through to hostname", CalicoSettings{NodenameFile: blank, Hostname: "h"}, "h", ""},
		{"then the OS host name, lowercased", CalicoSettings{NodenameFile: missing}, strings.ToLower(strings.TrimSpace(host)), ""},
		{"an unreadable file is an error, not a guess", CalicoSettings{NodenameFile: dir, Hostname: "h"}, "", "nodename_file"},
		{"an invalid name is an error", CalicoSettings{Nodename: "a/b"}, "", "nodename"},
		{"a key file is an error naming it", CalicoSettings{NodenameFile: key, Hostname: "h"}, "", "nodename_file"},
		{"/dev/zero is an error, read only so far", CalicoSettings{NodenameFile: "/dev/zero", Hostname: "h"}, "", "nodename_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.calico.Node()
			if tt.wantField != "" {
				var cniErr *types.Error
				if err == nil || !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidNetworkConfig || !strings.Contains(cniErr.Msg, tt.wantField) {
					t.Fatalf("Node() = %q, %v; want code 7 naming %s", got, err, tt.wantField)
				}
				// Issue 20, finding 4: a file's bytes never reach the error.
				if strings.Contains(cniErr.Msg, secret) || strings.Contains(cniErr.Msg, "PRIVATE KEY") || strings.Contains(cniErr.Msg, "\x00") {
					t.Fatalf("the error quotes the file: %q", cniErr.Msg)
				}
				if f := tt.calico.NodenameFile; f != "" && f != dir && !strings.Contains(cniErr.Msg, f) {
					t.Fatalf("the error %q does not name the file %s", cniErr.Msg, f)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Node() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// The config calico-node renders from Calico's own calico-etcd.yaml has
// etcd_endpoints and TLS files but no datastore_type: safe-ipam must see
// Calico's etcd there, as calico-ipam does.
func TestCalicoManifestConfigUsesCalicosEtcd(t *testing.T) {
	list, err := libcni.ConfListFromBytes(renderedCalicoConflist(t))
	if err != nil {
		t.Fatal(err)
	}
	var plugin map[string]any
	if err := json.Unmarshal(list.Plugins[0].Bytes, &plugin); err != nil {
		t.Fatal(err)
	}
	plugin["name"], plugin["cniVersion"] = list.Name, list.CNIVersion // as libcni adds them
	plugin["ipam"] = map[string]any{"type": "safe-ipam"}
	conf, _ := json.Marshal(plugin)
	c, err := Parse(conf)
	if err != nil {
		t.Fatal(err)
	}
	if c.Datastore() != DatastoreEtcd || c.Store.Type != StoreEtcd {
		t.Fatalf("datastore %q, store %+v; want Calico's etcd", c.Datastore(), c.Store)
	}
	if c.Store.CertFile != "/calico-secrets/etcd-cert" || c.Store.KeyFile != "/calico-secrets/etcd-key" || c.Store.CAFile != "/calico-secrets/etcd-ca" {
		t.Fatalf("store TLS files %+v", c.Store)
	}
}

// renderedCalicoConflist renders calico-etcd.yaml's cni_network_config as
// calico-node's installer does, with the TLS file paths its manifest uses.
func renderedCalicoConflist(t *testing.T) []byte {
	t.Helper()
	tmpl, err := testbed.CalicoNetworkTemplate()
	if err != nil {
		t.Fatalf("Calico's network config template: %v", err)
	}
	conflist, err := testbed.RenderCalicoNetwork(tmpl, map[string]string{
		"ETCD_ENDPOINTS": "https://10.0.0.10:2379", "ETCD_KEY_FILE": "/calico-secrets/etcd-key",
		"ETCD_CERT_FILE": "/calico-secrets/etcd-cert", "ETCD_CA_CERT_FILE": "/calico-secrets/etcd-ca",
		"CNI_MTU": "1440", "KUBECONFIG_FILEPATH": "/etc/cni/net.d/calico-kubeconfig"})
	if err != nil {
		t.Fatal(err)
	}
	return conflist
}
