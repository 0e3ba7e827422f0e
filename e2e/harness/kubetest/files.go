package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// files are what the API server is started with, all generated per
// server: nothing is shared with another test or with the machine.
type files struct {
	caFile, certFile, keyFile string // serving CA and certificate for 127.0.0.1
	saPub, saKey              string // service-account token signing pair
	tokenFile, adminToken     string // static tokens: the admin user only
}

func writeFiles(dir string) (*files, error) {
	dir = filepath.Join(dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	f := &files{caFile: filepath.Join(dir, "ca.crt"), certFile: filepath.Join(dir, "apiserver.crt"),
		keyFile: filepath.Join(dir, "apiserver.key"), saPub: filepath.Join(dir, "sa.pub"),
		saKey: filepath.Join(dir, "sa.key"), tokenFile: filepath.Join(dir, "tokens.csv")}
	if err := writeServing(f); err != nil {
		return nil, fmt.Errorf("kubetest: serving certificate: %w", err)
	}
	if err := writeKeyPair(f.saKey, f.saPub); err != nil {
		return nil, fmt.Errorf("kubetest: service-account key: %w", err)
	}
	tok, err := randomToken()
	if err != nil {
		return nil, err
	}
	f.adminToken = tok
	line := fmt.Sprintf("%s,admin,admin-uid,\"system:masters\"\n", tok)
	if err := os.WriteFile(f.tokenFile, []byte(line), 0o600); err != nil {
		return nil, fmt.Errorf("kubetest: token file: %w", err)
	}
	return f, nil
}

// writeServing makes a CA and a serving certificate it signs for
// 127.0.0.1 and localhost.
func writeServing(f *files) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubetest-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePEM(f.caFile, "CERTIFICATE", caDER); err != nil {
		return err
	}
	if err := writePEM(f.certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(f.keyFile, "EC PRIVATE KEY", keyDER)
}

// writeKeyPair writes an ECDSA key and its public half (service-account
// tokens are ES256 with it).
func writeKeyPair(keyFile, pubFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(keyFile, "EC PRIVATE KEY", der); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(pubFile, "PUBLIC KEY", pub)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("kubetest: token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func mustPool(caFile string) *x509.CertPool {
	pool := x509.NewCertPool()
	if b, err := os.ReadFile(caFile); err == nil {
		pool.AppendCertsFromPEM(b)
	}
	return pool
}

// clientcmdConfig is a one-cluster, one-user kubeconfig.
func clientcmdConfig(server, caFile, user, token string) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: user}
	cfg.CurrentContext = user
	return cfg
}
