package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
)

// calicoTLSConf fronts host-local with the records in an etcd over TLS,
// named the way Calico's plugin config names its etcd: the default store.
func calicoTLSConf(t *testing.T, server *etcdtest.Server, cert, key, ca string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(hostLocalConf(t, "1.1.0", "")), &m); err != nil {
		t.Fatal(err)
	}
	delete(m["ipam"].(map[string]any), "store")
	m["datastore_type"], m["etcd_endpoints"] = "etcdv3", server.Endpoint()
	m["etcd_cert_file"], m["etcd_key_file"], m["etcd_ca_cert_file"] = cert, key, ca
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// cniError decodes the error a failed plugin printed.
func cniError(t *testing.T, out outcome) (int, string) {
	t.Helper()
	if out.err == nil {
		t.Fatalf("exit 0; stdout %s", out.stdout)
	}
	var e struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	}
	if err := json.Unmarshal(out.stdout, &e); err != nil {
		t.Fatalf("stdout is not a CNI error: %q", out.stdout)
	}
	return e.Code, e.Msg
}

// Through the binary: a wrong TLS file fails ADD with 11 and STATUS with
// 50, naming the file; nothing is allocated. Good files ADD and DEL.
func TestEtcdStoreOverTLS(t *testing.T) {
	server := etcdtest.StartTLS(t)
	f := server.TLS
	missing := filepath.Join(t.TempDir(), "missing-key.pem")
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0"
	for _, tc := range []struct {
		name           string
		cert, key, ca  string
		named, setting string
	}{
		{"wrong CA", f.CertFile, f.KeyFile, f.OtherCAFile, f.OtherCAFile, "etcd_ca_cert_file"},
		{"missing key file", f.CertFile, missing, f.CAFile, missing, "etcd_key_file"},
		{"expired cert", f.ExpiredCertFile, f.ExpiredKeyFile, f.CAFile, f.ExpiredCertFile, "etcd_cert_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := calicoTLSConf(t, server, tc.cert, tc.key, tc.ca)
			for _, inv := range []struct {
				inv  binaryCall
				code int
			}{
				{binaryCall{"ADD", "c1", "eth0", args, conf}, 11},
				{binaryCall{"STATUS", "", "", "", conf}, 50},
			} {
				code, msg := cniError(t, inv.inv.run(t))
				if want := tc.named + " (" + tc.setting + ")"; code != inv.code || !strings.Contains(msg, want) {
					t.Errorf("%s: %d %q; want %d naming %q", inv.inv.command, code, msg, inv.code, want)
				}
			}
			assertNothingAllocated(t, conf)
		})
	}
	t.Run("good files", func(t *testing.T) {
		conf := calicoTLSConf(t, server, f.CertFile, f.KeyFile, f.CAFile)
		if out := (binaryCall{"ADD", "c1", "eth0", args, conf}).run(t); out.err != nil {
			t.Fatalf("ADD: %v %s", out.err, out.stdout)
		}
		if n := records(t, server); n != 1 {
			t.Fatalf("%d records in etcd after ADD, want 1", n)
		}
		if out := (binaryCall{"DEL", "c1", "eth0", args, conf}).run(t); out.err != nil {
			t.Fatalf("DEL: %v %s", out.err, out.stdout)
		}
		if n := records(t, server); n != 0 {
			t.Fatalf("%d records in etcd after DEL, want 0", n)
		}
		assertNothingAllocated(t, conf)
	})
}

func records(t *testing.T, server *etcdtest.Server) int64 {
	t.Helper()
	resp, err := server.Client().Get(context.Background(), etcdstore.RecordPrefix(config.DefaultEtcdPrefix, ""), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}
