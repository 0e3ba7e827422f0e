package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TLS mode: the shared client works across an outage, and the server
// refuses a client that presents no certificate.
func TestTLSRequiresClientCertificate(t *testing.T) {
	s := StartTLS(t)
	if s.Endpoint()[:8] != "https://" {
		t.Fatalf("endpoint %s is not https", s.Endpoint())
	}
	checkSurvivesPause(t, s)

	pemCA, err := os.ReadFile(s.TLS.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	anon, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint()}, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := anon.Get(ctx, "/a"); err == nil {
		t.Fatal("a client without a certificate read from a server that requires one")
	}
}

// The negative-test material is what it claims to be.
func TestTLSMaterial(t *testing.T) {
	s := StartTLS(t)
	f := s.TLS
	expired := parseCert(t, f.ExpiredCertFile)
	if !expired.NotAfter.Before(time.Now()) {
		t.Errorf("expired cert is valid until %s", expired.NotAfter)
	}
	if err := expired.CheckSignatureFrom(parseCert(t, f.CAFile)); err != nil {
		t.Errorf("expired cert is not signed by the CA: %v", err)
	}
	if err := parseCert(t, f.UntrustedCertFile).CheckSignatureFrom(parseCert(t, f.OtherCAFile)); err != nil {
		t.Errorf("untrusted cert is not signed by the other CA: %v", err)
	}
	if err := parseCert(t, f.serverCertFile).CheckSignatureFrom(parseCert(t, f.OtherCAFile)); err == nil {
		t.Error("the other CA signed the server certificate")
	}
}

func parseCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s holds no PEM block", file)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
