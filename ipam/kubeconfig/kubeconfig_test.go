package kubeconfig

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/bounded/boundedtest"
)

const config = `apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u}
clusters:
- name: k
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: ca.pem}
users:
- name: u
  user: {tokenFile: token}
`

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Load reads the files a kubeconfig names itself, relative to its
// directory, and leaves client-go none to read.
func TestLoadInlinesTheFilesItNames(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"config": config, "ca.pem": "CA", "token": "tok\n"})
	cfg, err := Load(filepath.Join(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.CAData) != "CA" || cfg.CAFile != "" || cfg.BearerToken != "tok" || cfg.BearerTokenFile != "" {
		t.Fatalf("config = CAData %q CAFile %q token %q tokenFile %q", cfg.CAData, cfg.CAFile, cfg.BearerToken, cfg.BearerTokenFile)
	}
}

// A FIFO at the kubeconfig's path or at a file it names is refused at
// once; client-go's loader waits on it for ever.
func TestLoadNeverWaitsOnAFIFO(t *testing.T) {
	for _, at := range []string{"config", "ca.pem", "token"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, map[string]string{"config": config, "ca.pem": "CA", "token": "tok"})
			boundedtest.FIFO(t, filepath.Join(dir, at))
			err := boundedtest.Returns(t, "Load", func() error { _, err := Load(filepath.Join(dir, "config")); return err })
			if !errors.Is(err, bounded.ErrNotRegular) || !strings.Contains(err.Error(), at) {
				t.Fatalf("Load = %v; want a refusal naming %s", err, at)
			}
		})
	}
}

// In a pod, the service account's CA and token are read through bounded
// too, and every request carries the token.
func TestInClusterSendsTheServiceAccountsToken(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Get("Authorization") }))
	defer srv.Close()
	dir := t.TempDir()
	write(t, dir, map[string]string{"ca.crt": "CA", "token": "sa-token\n"})
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "6443")
	cfg, err := inCluster(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || string(cfg.CAData) != "CA" {
		t.Fatalf("config = %s, CA %q", cfg.Host, cfg.CAData)
	}
	resp, err := cfg.WrapTransport(http.DefaultTransport).RoundTrip(httptest.NewRequest(http.MethodGet, srv.URL, nil).WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got != "Bearer sa-token" {
		t.Fatalf("Authorization = %q", got)
	}
	boundedtest.FIFO(t, filepath.Join(dir, "token"))
	err = boundedtest.Returns(t, "inCluster", func() error { _, err := inCluster(dir); return err })
	if !errors.Is(err, bounded.ErrNotRegular) {
		t.Fatalf("inCluster over a FIFO token = %v", err)
	}
}

// The service account's token, which the kubelet rotates, is read again
// once it is a minute old, and a failed re-read keeps the last one.
func TestTheServiceAccountTokenIsReadAgain(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"token": "first"})
	tokens := &tokenFile{path: filepath.Join(dir, "token")}
	get := func(want string) {
		t.Helper()
		if got, err := tokens.get(); err != nil || got != want {
			t.Fatalf("token = %q, %v; want %q", got, err, want)
		}
	}
	get("first")
	write(t, dir, map[string]string{"token": "second"})
	get("first") // within the minute
	tokens.at = tokens.at.Add(-2 * time.Minute)
	get("second")
	boundedtest.FIFO(t, filepath.Join(dir, "token"))
	tokens.at = tokens.at.Add(-2 * time.Minute)
	get("second")
}
