package cninode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/config"
)

func TestReadFile(t *testing.T) {
	calicoPlugin := `{"type":"calico","etcd_endpoints":"https://10.0.0.10:2379","etcd_cert_file":"/c","etcd_key_file":"/k",
		"etcd_ca_cert_file":"/ca","nodename_file":"/nf","ipam":%s}`
	list := func(ipam string) string {
		return `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[` + strings.Replace(calicoPlugin, "%s", ipam, 1) +
			`,{"type":"portmap","capabilities":{"portMappings":true}}]}`
	}
	tests := []struct {
		name, content string
		safeIPAM      bool
		prefix        string
		wantErr       string
	}{
		{"Calico alone", list(`{"type":"calico-ipam"}`), false, "", ""},
		{"conflist route", list(`{"type":"safe-ipam","store":{"type":"etcd","endpoints":["https://10.0.0.10:2379"],"prefix":"/p"}}`), true, "/p", ""},
		{"takeover keeps Calico's type", list(`{"type":"calico-ipam","delegate":{"type":"calico-ipam","binDir":"/opt/calico"}}`), true, config.DefaultEtcdPrefix, ""},
		{"a single plugin's .conf", `{"name":"k8s-pod-network","cniVersion":"1.0.0","type":"safe-ipam","etcd_endpoints":"https://10.0.0.10:2379",
			"nodename_file":"/nf","ipam":{"type":"safe-ipam"}}`, true, config.DefaultEtcdPrefix, ""},
		{"not JSON", `{"name":`, false, "", "conf.json"},
		{"no ipam", `{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`, false, "", "no plugin of network"},
		{"bad safe-ipam config", list(`{"type":"safe-ipam","logLevel":"loud"}`), false, "", "ipam.logLevel"},
		{"Calico key of the wrong type", strings.Replace(list(`{"type":"calico-ipam"}`), `"nodename_file":"/nf"`, `"nodename_file":1`, 1), false, "", "nodename_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "conf.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := ReadFile(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Network != "k8s-pod-network" || f.Calico.Datastore() != config.DatastoreEtcd || f.Calico.NodenameFile != "/nf" {
				t.Fatalf("file %+v", f)
			}
			if (f.SafeIPAM != nil) != tt.safeIPAM {
				t.Fatalf("SafeIPAM %+v, want present %v", f.SafeIPAM, tt.safeIPAM)
			}
			if f.SafeIPAM != nil && (f.SafeIPAM.Store.Type != config.StoreEtcd || f.SafeIPAM.Store.Prefix != tt.prefix || f.SafeIPAM.Network != "k8s-pod-network") {
				t.Fatalf("safe-ipam config %+v", f.SafeIPAM)
			}
		})
	}
}
