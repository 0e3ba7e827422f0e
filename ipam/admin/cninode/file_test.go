package cninode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/builds"
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
			f, err := ReadFile(path, "")
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

// The takeover install leaves Calico's config as Calico wrote it and puts
// safe-ipam in the bin dir as calico-ipam: reading the config on that
// node gives safe-ipam's config, so every admin command takes the node's
// own conflist (issue 19, item 1). Elsewhere calico-ipam is Calico's.
func TestReadFileOnATakenOverNode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "10-calico.conflist")
	conf := `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico","etcd_endpoints":"https://10.0.0.10:2379",
		"nodename":"node1","ipam":{"type":"calico-ipam"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := func(calicoIPAM string) string {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, CalicoIPAM), []byte(calicoIPAM), 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tt := range []struct {
		name, binDir string
		safeIPAM     bool
	}{
		{"calico-ipam is safe-ipam", bin("#!/bin/sh\n# " + builds.Mark + "\n"), true},
		{"calico-ipam is Calico's", bin("#!/bin/sh\n# calico\n"), false},
		{"no bin dir", "", false},
		{"a bin dir without calico-ipam", t.TempDir(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ReadFile(path, tt.binDir)
			if err != nil {
				t.Fatal(err)
			}
			if (f.SafeIPAM != nil) != tt.safeIPAM {
				t.Fatalf("safe-ipam config %+v, want one: %v", f.SafeIPAM, tt.safeIPAM)
			}
			if f.SafeIPAM != nil && (f.SafeIPAM.Delegate.File() != CalicoBinary || f.SafeIPAM.Store.Type != config.StoreEtcd) {
				t.Errorf("delegate %q, store %q; want Calico's binary and Calico's etcd", f.SafeIPAM.Delegate.File(), f.SafeIPAM.Store.Type)
			}
		})
	}
}

// Issue 46: beside safe-ipam's own config (install --mode=own-conflist),
// which sorts first, Calico's is read as the runtime reads its network:
// safe-ipam's; not when safe-ipam's configs another network, names no
// safe-ipam, or does not sort first.
func TestReadFileShadowedBySafeIPAMsOwn(t *testing.T) {
	calico := `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico","etcd_endpoints":"https://10.0.0.10:2379",
		"nodename":"node1","ipam":{"type":"calico-ipam"}}]}`
	own := strings.Replace(calico, `{"type":"calico-ipam"}`, `{"type":"safe-ipam","delegate":{"type":"calico-ipam"}}`, 1)
	for _, tt := range []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{"safe-ipam's sorts first", map[string]string{OwnConflist: own}, true},
		{"another network", map[string]string{OwnConflist: strings.Replace(own, "k8s-pod-network", "other", 1)}, false},
		{"no safe-ipam in it", map[string]string{OwnConflist: calico}, false},
		{"another config sorts first", map[string]string{OwnConflist: own, "00-aaa.conflist": calico}, false},
		{"none", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "10-calico.conflist")
			if tt.files == nil {
				tt.files = map[string]string{}
			}
			tt.files["10-calico.conflist"] = calico
			for name, data := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			f, err := ReadFile(path, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := f.SafeIPAM != nil && f.Path == filepath.Join(dir, OwnConflist); got != tt.want {
				t.Fatalf("read %s, safe-ipam's config %v; want safe-ipam's own read: %v", f.Path, f.SafeIPAM != nil, tt.want)
			}
		})
	}
}
