package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
)

// Issue 20, finding 8: a record store on plain-text etcd, or on https
// without a CA file, is warned about in the log, once (not on every pod
// start), naming the endpoint or the setting.
func TestExposedEtcdIsWarnedOnceInTheLog(t *testing.T) {
	plain := etcdtest.Start(t)
	secure := etcdtest.StartTLS(t)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0"
	tests := []struct {
		name  string
		conf  string
		names string
	}{
		{"plain text", calicoTLSConf(t, plain, "", "", ""), plain.Endpoint()},
		{"https without a CA file", calicoTLSConf(t, secure, secure.TLS.CertFile, secure.TLS.KeyFile, ""), "etcd_ca_cert_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logFile := filepath.Join(t.TempDir(), "safe-ipam.log")
			var m map[string]any
			if err := json.Unmarshal([]byte(tt.conf), &m); err != nil {
				t.Fatal(err)
			}
			m["ipam"].(map[string]any)["logFile"] = logFile
			conf, _ := json.Marshal(m)
			for _, cid := range []string{"c1", "c2"} {
				(binaryCall{"ADD", cid, "eth0", args, string(conf)}).run(t) // without a CA file it fails: the warning comes first
			}
			data, err := os.ReadFile(logFile)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(data), "etcd is exposed"); n != 1 || !strings.Contains(string(data), tt.names) {
				t.Fatalf("%d warnings in the log (want 1, naming %q):\n%s", n, tt.names, data)
			}
		})
	}
}
