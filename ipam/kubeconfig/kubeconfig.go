// Package kubeconfig gives the admin commands' client-go clients their
// config with every file read through bounded: the kubeconfig, the
// files it names (CA, client certificate and key, token file) and, in a
// pod, the service account's CA and token. client-go's own loader reads
// them with blocking opens and no size limit, so a FIFO at one of those
// paths would hold the command past SIGTERM. The CNI binary does not use
// this package (it keeps client-go off the hot path: package kubeapi).
package kubeconfig

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// ServiceAccountDir is where a pod's service account token and CA are.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Load is the client config of the kubeconfig at path (its current
// context), or of the pod's service account when path is "", as
// clientcmd.BuildConfigFromFlags("", path) gives.
func Load(path string) (*rest.Config, error) {
	if path == "" {
		return inCluster(ServiceAccountDir)
	}
	data, err := bounded.Read(path, bounded.Small)
	if err != nil {
		return nil, err
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", path, err)
	}
	dir := filepath.Dir(path)
	for name, c := range kc.Clusters {
		if err := inline(dir, &c.CertificateAuthority, &c.CertificateAuthorityData); err != nil {
			return nil, fmt.Errorf("%s: cluster %q: certificate-authority %w", path, name, err)
		}
	}
	for name, u := range kc.AuthInfos {
		if err := inline(dir, &u.ClientCertificate, &u.ClientCertificateData); err != nil {
			return nil, fmt.Errorf("%s: user %q: client-certificate %w", path, name, err)
		}
		if err := inline(dir, &u.ClientKey, &u.ClientKeyData); err != nil {
			return nil, fmt.Errorf("%s: user %q: client-key %w", path, name, err)
		}
		var token []byte
		if err := inline(dir, &u.TokenFile, &token); err != nil {
			return nil, fmt.Errorf("%s: user %q: tokenFile %w", path, name, err)
		}
		if token != nil {
			u.Token = strings.TrimSpace(string(token))
		}
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// inline reads the file *name names (relative to the kubeconfig's
// directory, as kubectl reads it) into *data and clears *name, so that
// client-go reads no file.
func inline(dir string, name *string, data *[]byte) error {
	if *name == "" {
		return nil
	}
	path := *name
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	b, err := bounded.Read(path, bounded.Small)
	if err != nil {
		return err
	}
	*data, *name = b, ""
	return nil
}

// inCluster is rest.InClusterConfig with its reads through bounded; the
// token, which the kubelet rotates, is read again at most once a minute.
func inCluster(dir string) (*rest.Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("no --kubeconfig, and not in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset)")
	}
	ca, err := bounded.Read(filepath.Join(dir, "ca.crt"), bounded.Small)
	if err != nil {
		return nil, fmt.Errorf("service account CA %w", err)
	}
	tokens := &tokenFile{path: filepath.Join(dir, "token")}
	if _, err := tokens.get(); err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		WrapTransport:   func(rt http.RoundTripper) http.RoundTripper { return bearer{rt, tokens} },
	}, nil
}

// tokenFile is a token file read through bounded, kept for a minute.
type tokenFile struct {
	path string
	mu   sync.Mutex
	tok  string
	at   time.Time
}

func (t *tokenFile) get() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tok != "" && time.Since(t.at) < time.Minute {
		return t.tok, nil
	}
	data, err := bounded.Read(t.path, bounded.Small)
	if err != nil {
		if t.tok != "" {
			return t.tok, nil // the kubelet is swapping it: the last one still serves
		}
		return "", fmt.Errorf("service account token %w", err)
	}
	t.tok, t.at = strings.TrimSpace(string(data)), time.Now()
	return t.tok, nil
}

// bearer sets the token on every request that carries none.
type bearer struct {
	next   http.RoundTripper
	tokens *tokenFile
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return b.next.RoundTrip(req)
	}
	tok, err := b.tokens.get()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+tok)
	return b.next.RoundTrip(req)
}
