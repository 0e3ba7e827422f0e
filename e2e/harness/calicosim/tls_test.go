package calicosim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
)

// newTLSSim is newSim over an etcd that requires client certificates.
func newTLSSim(t *testing.T, pools ...poolSpec) *sim {
	t.Helper()
	e := etcdtest.StartTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s := &sim{t: t, etcd: e, cli: e.Client(), ctx: ctx}
	return s.reset(t, pools...)
}

// tlsConf is the sim's config with Calico's etcd TLS keys.
func (s *sim) tlsConf(cert, key, ca string) []byte {
	return s.conf(map[string]any{"etcd_cert_file": cert, "etcd_key_file": key, "etcd_ca_cert_file": ca})
}

// ADD and DEL work against an etcd that requires client certificates, as
// calico-ipam does with Calico's etcd_*_file keys.
func TestAddDelOverTLS(t *testing.T) {
	s := newTLSSim(t, poolSpec{"p", "10.0.0.0/28", 29})
	f := s.etcd.TLS
	conf := s.tlsConf(f.CertFile, f.KeyFile, f.CAFile)
	p := pod{container: "c1", namespace: "default", name: "web-0"}
	res, err := s.add(ModernHandles, p, conf)
	if err != nil {
		t.Fatalf("ADD over TLS: %v", err)
	}
	if len(res.IPs) != 1 {
		t.Fatalf("ADD: %d IPs, want 1", len(res.IPs))
	}
	addr := ipnetPrefix(t, res.IPs[0].Address.String()).Addr()
	if al, ok := s.state().Lookup(addr); !ok || al.Handle != network+".c1" {
		t.Fatalf("after ADD %s is %+v, %v; want it under %s.c1", addr, al, ok, network)
	}
	if err := s.plugin(ModernHandles).Del(p.args(conf)); err != nil {
		t.Fatalf("DEL over TLS: %v", err)
	}
	if al, ok := s.state().Lookup(addr); ok {
		t.Fatalf("after DEL %s is still held: %+v", addr, al)
	}
}

// A CA that did not sign etcd's certificate fails ADD and DEL with an
// error that names the CA file.
func TestWrongCANamesTheFile(t *testing.T) {
	s := newTLSSim(t, poolSpec{"p", "10.0.0.0/28", 29})
	f := s.etcd.TLS
	conf := s.tlsConf(f.CertFile, f.KeyFile, f.OtherCAFile)
	p := pod{container: "c1", namespace: "default", name: "web-0"}
	env := map[string]string{EnvLockFile: NoLock, EnvTimeout: "10s"}
	plugin := New(func(k string) string { return env[k] }, &strings.Builder{}, &strings.Builder{})
	_, addErr := plugin.Allocate(p.args(conf))
	delErr := plugin.Del(p.args(conf))
	for verb, err := range map[string]error{"ADD": addErr, "DEL": delErr} {
		if err == nil || !strings.Contains(err.Error(), "etcd_ca_cert_file") || !strings.Contains(err.Error(), f.OtherCAFile) {
			t.Errorf("%s with a wrong CA: %v; want an error naming etcd_ca_cert_file %s", verb, err, f.OtherCAFile)
		}
	}
}
