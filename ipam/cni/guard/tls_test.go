package guard_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
)

// tlsFiles are a client certificate, its key and a CA for the store.
type tlsFiles struct{ cert, key, ca string }

// tlsConf is the rig's config with its records in an etcd over TLS: from
// Calico's top-level keys (the default store), or from ipam.store.
func tlsConf(r *rig, server *etcdtest.Server, f tlsFiles, explicit bool) []byte {
	r.t.Helper()
	var conf map[string]any
	if err := json.Unmarshal(r.conf(), &conf); err != nil {
		r.t.Fatal(err)
	}
	ipam := conf["ipam"].(map[string]any)
	delete(ipam, "store")
	conf["datastore_type"] = "etcdv3"
	conf["etcd_endpoints"] = server.Endpoint()
	conf["etcd_cert_file"], conf["etcd_key_file"], conf["etcd_ca_cert_file"] = f.cert, f.key, f.ca
	if explicit {
		ipam["store"] = map[string]any{"type": "etcd", "endpoints": []string{server.Endpoint()}, "prefix": r.prefix,
			"certFile": f.cert, "keyFile": f.key, "caFile": f.ca}
	}
	data, err := json.Marshal(conf)
	if err != nil {
		r.t.Fatal(err)
	}
	return data
}

// storeSources are the two ways a config points the store at etcd, with
// the names of the settings that hold the cert, key and CA.
var storeSources = []struct {
	name     string
	explicit bool
	cert     string
	key      string
	ca       string
}{
	{"calico keys", false, "etcd_cert_file", "etcd_key_file", "etcd_ca_cert_file"},
	{"ipam.store", true, "ipam.store.certFile", "ipam.store.keyFile", "ipam.store.caFile"},
}

// A wrong TLS file fails ADD with 11 before the delegate runs and STATUS
// with 50, and both name the file and its setting.
func TestStoreTLSFaults(t *testing.T) {
	server := etcdtest.StartTLS(t)
	good := tlsFiles{server.TLS.CertFile, server.TLS.KeyFile, server.TLS.CAFile}
	missing := filepath.Join(t.TempDir(), "missing-key.pem")
	faults := []struct {
		name  string
		files tlsFiles
		file  string                            // named in the error
		want  func(cert, key, ca string) string // the setting and what is wrong
	}{
		{"wrong CA", tlsFiles{good.cert, good.key, server.TLS.OtherCAFile}, server.TLS.OtherCAFile,
			func(_, _, ca string) string { return "(" + ca + ")" }},
		{"missing key file", tlsFiles{good.cert, missing, good.ca}, missing,
			func(_, key, _ string) string { return "(" + key + ") does not exist" }},
		{"expired cert", tlsFiles{server.TLS.ExpiredCertFile, server.TLS.ExpiredKeyFile, good.ca}, server.TLS.ExpiredCertFile,
			func(cert, _, _ string) string { return "(" + cert + ") expired at" }},
	}
	for _, src := range storeSources {
		for _, fault := range faults {
			t.Run(src.name+"/"+fault.name, func(t *testing.T) {
				r := newRig(t, "file")
				conf := tlsConf(r, server, fault.files, src.explicit)
				wants := []string{fault.file, fault.want(src.cert, src.key, src.ca)}
				_, err := r.run("ADD", env("c1"), conf)
				checkNamed(t, "ADD", err, types.ErrTryAgainLater, wants)
				_, err = r.run("STATUS", delegate.Env{Path: binDir}, conf)
				checkNamed(t, "STATUS", err, types.ErrPluginNotAvailable, wants)
				for _, c := range r.calls("") {
					if c.Command != "VERSION" {
						t.Errorf("delegate called: %+v", c)
					}
				}
			})
		}
	}
}

func checkNamed(t *testing.T, verb string, err error, code uint, wants []string) {
	t.Helper()
	if cniCode(err) != code {
		t.Errorf("%s: %v; want code %d", verb, err, code)
		return
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q\ndoes not name %q", verb, err, w)
		}
	}
}

// With good TLS files the store works: ADD writes the record into the
// TLS etcd, STATUS is ready and DEL removes the record.
func TestStoreOverTLS(t *testing.T) {
	server := etcdtest.StartTLS(t)
	good := tlsFiles{server.TLS.CertFile, server.TLS.KeyFile, server.TLS.CAFile}
	for _, src := range storeSources {
		t.Run(src.name, func(t *testing.T) {
			r := newRig(t, "file")
			conf := tlsConf(r, server, good, src.explicit)
			prefix := etcdstore.RecordPrefix(config.DefaultEtcdPrefix, "net1")
			if src.explicit {
				prefix = etcdstore.RecordPrefix(r.prefix, "net1")
			}
			if _, err := r.run("ADD", env("c1"), conf); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if n := countKeys(t, server, prefix); n != 1 || len(r.calls("ADD")) != 1 {
				t.Fatalf("after ADD: %d records under %s, %d delegate ADDs; want 1, 1", n, prefix, len(r.calls("ADD")))
			}
			if _, err := r.run("STATUS", delegate.Env{Path: binDir}, conf); err != nil {
				t.Fatalf("STATUS: %v", err)
			}
			if _, err := r.run("DEL", env("c1"), conf); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if n := countKeys(t, server, prefix); n != 0 || len(r.held()) != 0 {
				t.Fatalf("after DEL: %d records, delegate holds %v", n, r.held())
			}
		})
	}
}

func countKeys(t *testing.T, server *etcdtest.Server, prefix string) int64 {
	t.Helper()
	resp, err := server.Client().Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}
