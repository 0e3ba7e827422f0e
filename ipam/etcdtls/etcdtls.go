// Package etcdtls names the TLS files safe-ipam reaches etcd with and
// the settings that named them, loads them with errors that name both,
// and says how a connection to etcd is exposed. It links no etcd client,
// so the CNI binary's lean build (package config) can name them.
package etcdtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// File is one TLS file and the setting that named it, so that an error
// tells the operator which setting to fix.
type File struct {
	Path    string
	Setting string // for example "etcd_cert_file", "ipam.store.certFile" or "--etcd-cert"
}

func (f File) String() string { return fmt.Sprintf("%s (%s)", f.Path, f.Setting) }

// Files are the client certificate, its key and the CA that signs the
// servers' certificates. All empty means plain http.
type Files struct {
	Cert, Key, CA File
}

// Enabled says whether any file is set.
func (t Files) Enabled() bool { return t.Cert.Path != "" || t.Key.Path != "" || t.CA.Path != "" }

// Config builds the client TLS config from the files, or nil when none is
// set. Every error names the file and its setting. A CA left unset means
// the system's roots.
func (t Files) Config(now time.Time) (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.Cert.Path != "" || t.Key.Path != "" {
		cert, err := t.keyPair(now)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.CA.Path != "" {
		pool, err := caPool(t.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// keyPair loads the client certificate and key and checks that the
// certificate is valid now: etcd would only answer an expired one with a
// handshake failure that names no file.
func (t Files) keyPair(now time.Time) (tls.Certificate, error) {
	switch {
	case t.Cert.Path == "":
		return tls.Certificate{}, fmt.Errorf("client key file %s is set without a certificate file (%s)", t.Key, t.Cert.Setting)
	case t.Key.Path == "":
		return tls.Certificate{}, fmt.Errorf("client certificate file %s is set without a key file (%s)", t.Cert, t.Key.Setting)
	}
	certPEM, err := readFile("client certificate", t.Cert)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readFile("client key", t.Key)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("client certificate file %s and key file %s: %w", t.Cert, t.Key, err)
	}
	// X509KeyPair has parsed the leaf already; checking it costs no read.
	if leaf := cert.Leaf; leaf != nil {
		if now.After(leaf.NotAfter) {
			return tls.Certificate{}, fmt.Errorf("client certificate file %s expired at %s (now %s)",
				t.Cert, leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
		if now.Before(leaf.NotBefore) {
			return tls.Certificate{}, fmt.Errorf("client certificate file %s is not valid before %s (now %s)",
				t.Cert, leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
	}
	return cert, nil
}

func caPool(ca File) (*x509.CertPool, error) {
	data, err := readFile("CA", ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", ca)
	}
	return pool, nil
}

func readFile(what string, f File) ([]byte, error) {
	data, err := bounded.Read(f.Path, bounded.Small)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s file %s does not exist", what, f)
	}
	if err != nil {
		return nil, fmt.Errorf("%s file (%s) %w", what, f.Setting, err)
	}
	return data, nil
}
