package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files of a server in TLS mode. The server trusts
// client certificates signed by CAFile and requires one.
type TLSFiles struct {
	CAFile   string // the CA that signed the server's and the good client's certificate
	CertFile string // a client certificate the server accepts
	KeyFile  string // its key

	// Material for tests of what must fail.
	OtherCAFile       string // a CA unrelated to the server: a client trusting only it rejects the server
	ExpiredCertFile   string // a client certificate signed by CAFile whose NotAfter is in the past
	ExpiredKeyFile    string // its key
	UntrustedCertFile string // a client certificate signed by OtherCAFile: the server rejects it
	UntrustedKeyFile  string // its key

	serverCertFile, serverKeyFile string
}

// issuer is a CA that can sign certificates.
type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// certSpec says what one certificate is for.
type certSpec struct {
	name      string // file base name
	cn        string
	notBefore time.Time
	notAfter  time.Time
	server    bool // for 127.0.0.1 and localhost, else a client certificate
}

// writeTLSFiles generates a CA, a server certificate for the loopback
// addresses, client certificates and the negative-test material in dir.
func writeTLSFiles(dir string) (*TLSFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tls dir: %w", err)
	}
	now := time.Now()
	valid := func(name, cn string, server bool) certSpec {
		return certSpec{name: name, cn: cn, notBefore: now.Add(-time.Hour), notAfter: now.Add(24 * time.Hour), server: server}
	}
	ca, caFile, err := newCA(dir, "ca", now)
	if err != nil {
		return nil, err
	}
	other, otherFile, err := newCA(dir, "other-ca", now)
	if err != nil {
		return nil, err
	}
	f := &TLSFiles{CAFile: caFile, OtherCAFile: otherFile}
	expired := certSpec{name: "expired", cn: "expired-client", notBefore: now.Add(-48 * time.Hour), notAfter: now.Add(-24 * time.Hour)}
	for _, w := range []struct {
		by        issuer
		spec      certSpec
		cert, key *string
	}{
		{ca, valid("server", "etcd-server", true), &f.serverCertFile, &f.serverKeyFile},
		{ca, valid("client", "safe-ipam", false), &f.CertFile, &f.KeyFile},
		{ca, expired, &f.ExpiredCertFile, &f.ExpiredKeyFile},
		{other, valid("untrusted", "stranger", false), &f.UntrustedCertFile, &f.UntrustedKeyFile},
	} {
		if *w.cert, *w.key, err = w.by.sign(dir, w.spec); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func newCA(dir, name string, now time.Time) (issuer, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return issuer{}, "", fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "etcdtest " + name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return issuer{}, "", fmt.Errorf("CA %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return issuer{}, "", err
	}
	file := filepath.Join(dir, name+".pem")
	return issuer{cert: cert, key: key}, file, writePEM(file, "CERTIFICATE", der)
}

// sign issues a certificate and writes it and its key as <name>.pem and
// <name>-key.pem.
func (ca issuer) sign(dir string, spec certSpec) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("key for %s: %w", spec.name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: spec.cn},
		NotBefore: spec.notBefore, NotAfter: spec.notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if spec.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", "", fmt.Errorf("certificate %s: %w", spec.name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, spec.name+".pem"), filepath.Join(dir, spec.name+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writePEM(keyFile, "EC PRIVATE KEY", keyDER)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the system's randomness is gone
	}
	return n
}

func writePEM(file, kind string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return nil
}

// clientConfig is the TLS config of the server's own client: the good
// client certificate, trusting CAFile.
func (f *TLSFiles) clientConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, err
	}
	pemCA, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
