package etcdconn

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
)

// files names the TLS files as Calico's plugin config does.
func files(cert, key, ca string) etcdtls.Files {
	return etcdtls.Files{
		Cert: etcdtls.File{Path: cert, Setting: "etcd_cert_file"},
		Key:  etcdtls.File{Path: key, Setting: "etcd_key_file"},
		CA:   etcdtls.File{Path: ca, Setting: "etcd_ca_cert_file"},
	}
}

// Against an etcd that requires client certificates, every way the TLS
// files can be wrong fails with an error naming the file and its setting.
func TestConnectTLS(t *testing.T) {
	server := etcdtest.StartTLS(t)
	f := server.TLS
	missing := filepath.Join(t.TempDir(), "nope.pem")
	for _, tc := range []struct {
		name  string
		files etcdtls.Files
		want  []string // in the error; none: Connect succeeds
	}{
		{"good", files(f.CertFile, f.KeyFile, f.CAFile), nil},
		{"wrong CA", files(f.CertFile, f.KeyFile, f.OtherCAFile),
			[]string{"server certificate of", "not trusted by CA file " + f.OtherCAFile + " (etcd_ca_cert_file)", "x509:"}},
		{"missing key file", files(f.CertFile, missing, f.CAFile),
			[]string{"client key file " + missing + " (etcd_key_file) does not exist"}},
		{"missing cert file", files(missing, f.KeyFile, f.CAFile),
			[]string{"client certificate file " + missing + " (etcd_cert_file) does not exist"}},
		{"missing CA file", files(f.CertFile, f.KeyFile, missing),
			[]string{"CA file " + missing + " (etcd_ca_cert_file) does not exist"}},
		{"expired cert", files(f.ExpiredCertFile, f.ExpiredKeyFile, f.CAFile),
			[]string{"client certificate file " + f.ExpiredCertFile + " (etcd_cert_file) expired at "}},
		{"key of another cert", files(f.CertFile, f.ExpiredKeyFile, f.CAFile),
			[]string{f.CertFile + " (etcd_cert_file)", f.ExpiredKeyFile + " (etcd_key_file)", "does not match"}},
		{"CA file without a certificate", files(f.CertFile, f.KeyFile, f.KeyFile),
			[]string{"CA file " + f.KeyFile + " (etcd_ca_cert_file) holds no PEM certificate"}},
		{"key without cert", files("", f.KeyFile, f.CAFile),
			[]string{"client key file " + f.KeyFile + " (etcd_key_file) is set without a certificate file (etcd_cert_file)"}},
		{"cert signed by a CA etcd does not trust", files(f.UntrustedCertFile, f.UntrustedKeyFile, f.CAFile),
			[]string{"rejected client certificate file " + f.UntrustedCertFile + " (etcd_cert_file)", "remote error"}},
		{"no client cert", files("", "", f.CAFile),
			[]string{"requires a client certificate and none is set (etcd_cert_file, etcd_key_file)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, err := Connect(context.Background(), Config{Endpoints: []string{server.Endpoint()}, TLS: tc.files, DialTimeout: 10 * time.Second})
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				defer cli.Close()
				if _, err := cli.Put(context.Background(), "/etcdconn", "ok"); err != nil {
					t.Fatalf("put over TLS: %v", err)
				}
				return
			}
			if err == nil {
				cli.Close()
				t.Fatalf("connected; want an error with %q", tc.want)
			}
			t.Logf("error: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "not reachable within") {
				t.Errorf("a TLS refusal waited for the dial timeout: %v", err)
			}
		})
	}
}

// A server that is down is reported as unreachable, not as a TLS fault,
// and the diagnosis says what the dial found.
func TestConnectTLSServerDown(t *testing.T) {
	server := etcdtest.StartTLS(t)
	f := server.TLS
	server.Pause()
	_, err := Connect(context.Background(), Config{Endpoints: []string{server.Endpoint()}, TLS: files(f.CertFile, f.KeyFile, f.CAFile), DialTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "not reachable within") || strings.Contains(err.Error(), "certificate") {
		t.Fatalf("connect to a stopped etcd: %v", err)
	}
}

// A good connection costs one TCP connection: the diagnostic dial runs
// only when connecting fails.
func TestConnectTLSDialsOnce(t *testing.T) {
	server := etcdtest.StartTLS(t)
	f := server.TLS
	proxy := countingProxy(t, strings.TrimPrefix(server.Endpoint(), "https://"))
	cli, err := Connect(context.Background(), Config{Endpoints: []string{"https://" + proxy.addr}, TLS: files(f.CertFile, f.KeyFile, f.CAFile), DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Get(context.Background(), "/x"); err != nil {
		t.Fatal(err)
	}
	if n := proxy.accepted.Load(); n != 1 {
		t.Fatalf("%d connections for one client, want 1", n)
	}
}

type proxy struct {
	addr     string
	accepted atomic.Int64
}

// countingProxy forwards TCP connections to target and counts them.
func countingProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &proxy{addr: l.Addr().String()}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}
