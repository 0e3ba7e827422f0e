package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

func TestParseDefaults(t *testing.T) {
	tests := []struct {
		name      string
		conf      string
		wantStore Store
	}{
		{"file store by default", `{"cniVersion":"1.0.0","name":"n","type":"ptp","ipam":{"type":"safe-ipam"}}`,
			Store{Type: StoreFile, Dir: DefaultStoreDir, DialTimeout: Duration(DefaultDialTimeout)}},
		{"Calico's etcd when calico-ipam uses etcd", `{"cniVersion":"1.0.0","name":"n","type":"calico","datastore_type":"etcdv3",
			"etcd_endpoints":"https://10.0.0.1:2379, https://10.0.0.2:2379","etcd_cert_file":"/c","etcd_key_file":"/k","etcd_ca_cert_file":"/ca","ipam":{"type":"safe-ipam"}}`,
			Store{Type: StoreEtcd, Endpoints: []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379"}, Prefix: DefaultEtcdPrefix,
				CertFile: "/c", KeyFile: "/k", CAFile: "/ca", DialTimeout: Duration(DefaultDialTimeout)}},
		{"kubernetes datastore keeps files", `{"cniVersion":"1.0.0","name":"n","type":"calico","datastore_type":"kubernetes","ipam":{"type":"safe-ipam"}}`,
			Store{Type: StoreFile, Dir: DefaultStoreDir, DialTimeout: Duration(DefaultDialTimeout)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.conf))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(c.Store)
			want, _ := json.Marshal(tt.wantStore)
			if string(got) != string(want) {
				t.Errorf("store = %s, want %s", got, want)
			}
			if c.Delegate.Type != "calico-ipam" || c.DelegateHandles != HandlesContainer || c.GCGracePeriod != 60*time.Second ||
				c.LogLevel != "info" || c.LogFile != DefaultLogFile || c.Delegate.ForwardsCheck() {
				t.Errorf("defaults = %+v", c)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	ipam := func(s string) string {
		return `{"cniVersion":"1.0.0","name":"n","type":"ptp","ipam":{"type":"safe-ipam",` + s + `}}`
	}
	tests := []struct {
		name, conf, field string
		code              uint
	}{
		{"malformed JSON", `{"name":`, "decoding", types.ErrDecodingFailure},
		{"not an object", `[1]`, "decoding", types.ErrDecodingFailure},
		{"no name", `{"cniVersion":"1.0.0","type":"ptp","ipam":{"type":"safe-ipam"}}`, "name", types.ErrInvalidNetworkConfig},
		{"no ipam", `{"cniVersion":"1.0.0","name":"n","type":"ptp"}`, "ipam", types.ErrInvalidNetworkConfig},
		{"ipam not an object", `{"cniVersion":"1.0.0","name":"n","type":"ptp","ipam":"x"}`, "ipam", types.ErrInvalidNetworkConfig},
		{"no ipam type", `{"cniVersion":"1.0.0","name":"n","type":"ptp","ipam":{}}`, "ipam.type", types.ErrInvalidNetworkConfig},
		{"unknown delegateHandles", ipam(`"delegateHandles":"podname"`), "ipam.delegateHandles", types.ErrInvalidNetworkConfig},
		{"delegateHandles not a string", ipam(`"delegateHandles":1`), "ipam.delegateHandles", types.ErrInvalidNetworkConfig},
		{"unknown store type", ipam(`"store":{"type":"redis"}`), "ipam.store.type", types.ErrInvalidNetworkConfig},
		{"typo in store", ipam(`"store":{"type":"file","directory":"/x"}`), "ipam.store", types.ErrInvalidNetworkConfig},
		{"relative store dir", ipam(`"store":{"type":"file","dir":"x"}`), "ipam.store.dir", types.ErrInvalidNetworkConfig},
		{"etcd without endpoints", ipam(`"store":{"type":"etcd"}`), "ipam.store.endpoints", types.ErrInvalidNetworkConfig},
		{"etcd endpoint not a URL", ipam(`"store":{"type":"etcd","endpoints":["10.0.0.1:2379"]}`), "ipam.store.endpoints", types.ErrInvalidNetworkConfig},
		{"etcd prefix", ipam(`"store":{"type":"etcd","endpoints":["http://a:1"],"prefix":"x"}`), "ipam.store.prefix", types.ErrInvalidNetworkConfig},
		{"cert without key", ipam(`"store":{"type":"etcd","endpoints":["http://a:1"],"certFile":"/c"}`), "ipam.store.certFile", types.ErrInvalidNetworkConfig},
		{"bad dial timeout", ipam(`"store":{"type":"etcd","endpoints":["http://a:1"],"dialTimeout":"soon"}`), "ipam.store", types.ErrInvalidNetworkConfig},
		{"delegate type a path", ipam(`"delegate":{"type":"../calico-ipam"}`), "ipam.delegate.type", types.ErrInvalidNetworkConfig},
		{"delegate is itself", ipam(`"delegate":{"type":"safe-ipam"}`), "ipam.delegate.type", types.ErrInvalidNetworkConfig},
		{"typo in delegate", ipam(`"delegate":{"type":"calico-ipam","bin_dir":"/x"}`), "ipam.delegate", types.ErrInvalidNetworkConfig},
		{"relative binDir", ipam(`"delegate":{"type":"calico-ipam","binDir":"bin"}`), "ipam.delegate.binDir", types.ErrInvalidNetworkConfig},
		{"log level", ipam(`"logLevel":"verbose"`), "ipam.logLevel", types.ErrInvalidNetworkConfig},
		{"relative log file", ipam(`"logFile":"x.log"`), "ipam.logFile", types.ErrInvalidNetworkConfig},
		{"grace period", ipam(`"gcGracePeriod":"1 minute"`), "ipam.gcGracePeriod", types.ErrInvalidNetworkConfig},
		{"negative grace period", ipam(`"gcGracePeriod":"-1s"`), "ipam.gcGracePeriod", types.ErrInvalidNetworkConfig},
		{"verb timeout", ipam(`"verbTimeout":"soon"`), "ipam.verbTimeout", types.ErrInvalidNetworkConfig},
		{"zero verb timeout", ipam(`"verbTimeout":"0s"`), "ipam.verbTimeout", types.ErrInvalidNetworkConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.conf))
			var cniErr *types.Error
			if !errors.As(err, &cniErr) {
				t.Fatalf("Parse = %v; want a CNI error", err)
			}
			if cniErr.Code != tt.code || !strings.Contains(cniErr.Msg, tt.field) {
				t.Errorf("error = code %d %q; want code %d naming %q", cniErr.Code, cniErr.Msg, tt.code, tt.field)
			}
		})
	}
}

func TestDelegateConfigKeepsForeignKeysByteForByte(t *testing.T) {
	in := `{"cniVersion":"1.1.0","name":"k8s-pod-network","type":"safe-ipam","datastore_type":"etcdv3","etcd_endpoints":"http://127.0.0.1:2379",
		"nodename":"node1","kubernetes":{"kubeconfig":"/k","z":[1, 2.50]},"runtimeConfig":{"x":1},
		"ipam":{"type":"safe-ipam","delegateHandles":"pod","store":{"type":"file","dir":"/s"},"ipv4_pools":["10.244.0.0/16"],"assign_ipv6":"false","custom":{"a":  1}}}`
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out := c.DelegateConfig("1.0.0", []byte(`{"cniVersion":"1.0.0","ips":[]}`))
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	var ipam map[string]json.RawMessage
	_ = json.Unmarshal(got["ipam"], &ipam)
	checks := map[string]string{
		"cniVersion": `"1.0.0"`, "type": `"calico-ipam"`, "kubernetes": `{"kubeconfig":"/k","z":[1, 2.50]}`,
		"datastore_type": `"etcdv3"`, "runtimeConfig": `{"x":1}`, "prevResult": `{"cniVersion":"1.0.0","ips":[]}`,
	}
	for k, want := range checks {
		if string(got[k]) != want {
			t.Errorf("%s = %s, want %s", k, got[k], want)
		}
	}
	ipamChecks := map[string]string{"type": `"calico-ipam"`, "ipv4_pools": `["10.244.0.0/16"]`, "assign_ipv6": `"false"`, "custom": `{"a":  1}`}
	for k, want := range ipamChecks {
		if string(ipam[k]) != want {
			t.Errorf("ipam.%s = %s, want %s", k, ipam[k], want)
		}
	}
	for _, k := range []string{"delegateHandles", "store"} {
		if _, ok := ipam[k]; ok {
			t.Errorf("ipam.%s passed to the delegate", k)
		}
	}
}

func FuzzParse(f *testing.F) {
	seeds := []string{
		`{"cniVersion":"1.0.0","name":"n","type":"ptp","ipam":{"type":"safe-ipam"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"safe-ipam","store":{"type":"etcd","endpoints":["http://a:1"]},"delegateHandles":"pod"}}`,
		`{"name":"n","ipam":{"type":"x","delegate":{"type":"y","binDir":"/b"},"gcGracePeriod":"5s"}}`,
		`{"name":"n","datastore_type":"etcdv3","etcd_endpoints":"http://a:1,","ipam":{"type":"x"}}`,
		`{`, `null`, `{"ipam":null}`,
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse([]byte(s))
		if err != nil {
			var cniErr *types.Error
			if !errors.As(err, &cniErr) || (cniErr.Code != types.ErrDecodingFailure && cniErr.Code != types.ErrInvalidNetworkConfig) {
				t.Fatalf("Parse(%q) = %v; want code 6 or 7", s, err)
			}
			return
		}
		if c.Network == "" || !validPluginName(c.Delegate.Type) || (c.Store.Type != StoreFile && c.Store.Type != StoreEtcd) {
			t.Fatalf("Parse(%q) accepted %+v", s, c)
		}
		if out := c.DelegateConfig("1.0.0", nil); !json.Valid(out) {
			t.Fatalf("delegate config of %q is not JSON: %s", s, out)
		}
	})
}

// The node's leave for a delegate outside CNI_PATH is safe-ipam's key:
// the delegate never sees it (review of issue 42).
func TestTheNodesOutsideLeaveIsNotTheDelegates(t *testing.T) {
	c, err := ParseWithNodeSettings([]byte(`{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"safe-ipam"}}`), []byte(`{"delegateOutsideCNIPath":true}`), "/opt/cni/bin/.safe-ipam.json")
	if err != nil || !c.Delegate.OutsideCNIPath {
		t.Fatalf("parse with the node's leave: %+v, %v", c, err)
	}
	if out := c.DelegateConfig("1.0.0", nil); strings.Contains(string(out), "delegateOutsideCNIPath") {
		t.Fatalf("the delegate's config carries the node's leave: %s", out)
	}
}

// Issue 44, item 3: an etcd store without endpoints follows Calico's etcd,
// and an error about a TLS file it took from Calico names Calico's key,
// where the file came from, not ipam.store's.
func TestAFollowedStoreNamesCalicosTLSKeys(t *testing.T) {
	conf := `{"cniVersion":"1.0.0","name":"n","type":"calico","etcd_endpoints":"https://10.0.0.1:2379",
		"etcd_cert_file":"/c","etcd_key_file":"/k","etcd_ca_cert_file":"/ca","ipam":{"type":"safe-ipam","store":{"type":"etcd"}}}`
	cfg, err := Parse([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Store.Endpoints) != 1 || cfg.Store.Endpoints[0] != "https://10.0.0.1:2379" {
		t.Fatalf("store endpoints %v; want Calico's", cfg.Store.Endpoints)
	}
	f := cfg.StoreTLS("")
	if f.Cert.Setting != "etcd_cert_file" || f.Key.Setting != "etcd_key_file" || f.CA.Setting != "etcd_ca_cert_file" {
		t.Errorf("TLS files named %q, %q, %q; want Calico's keys", f.Cert.Setting, f.Key.Setting, f.CA.Setting)
	}
}
