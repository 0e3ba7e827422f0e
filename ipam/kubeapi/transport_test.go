package kubeapi

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The client is as strict as client-go about the transport, and stricter
// about credentials: against a real TLS server and a plain one, a token
// never travels in clear, a CA with insecure mode is refused, and a
// redirect that changes scheme or host is not followed.
func TestTransportRefusals(t *testing.T) {
	var mu sync.Mutex
	var clearAuth []string // Authorization headers the plain server saw
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		clearAuth = append(clearAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprint(w, `{"metadata":{"name":"plain"}}`)
	}))
	defer plain.Close()
	var tlsURL string
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-plain":
			http.Redirect(w, r, plain.URL+"/obj", http.StatusFound)
		case "/to-other-host":
			http.Redirect(w, r, strings.Replace(tlsURL, "127.0.0.1", "localhost", 1)+"/obj", http.StatusFound)
		case "/to-same":
			http.Redirect(w, r, "/obj", http.StatusFound)
		default:
			fmt.Fprint(w, `{"metadata":{"name":"secure"}}`)
		}
	}))
	defer secure.Close()
	tlsURL = secure.URL
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, server, cluster, user, path string
		wantNew, wantGet, wantExposure    string // substrings; "" for none
	}{
		{"a token over plain http", plain.URL, "", "{token: secret}", "/obj", "plain http", "", ""},
		{"plain http without credentials", plain.URL, "", "{}", "/obj", "", "", "plain http"},
		{"a CA and insecure mode together", secure.URL, "certificate-authority: " + ca + "\n    insecure-skip-tls-verify: true", "{token: secret}", "/obj", "together", "", ""},
		{"insecure mode alone", secure.URL, "insecure-skip-tls-verify: true", "{token: secret}", "/obj", "", "", "insecure-skip-tls-verify"},
		{"a redirect from https to http", secure.URL, "certificate-authority: " + ca, "{token: secret}", "/to-plain", "", "refusing a redirect", ""},
		{"a redirect to another host", secure.URL, "certificate-authority: " + ca, "{token: secret}", "/to-other-host", "", "refusing a redirect", ""},
		{"a redirect on the same origin", secure.URL, "certificate-authority: " + ca, "{token: secret}", "/to-same", "", "", ""},
		{"not an http URL", "ftp://127.0.0.1", "", "{}", "/obj", "not an http or https URL", "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := fmt.Sprintf("current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster:\n    server: %s\n    %s\nusers:\n- name: u\n  user: %s\n", tt.server, tt.cluster, tt.user)
			path := filepath.Join(dir, fmt.Sprintf("kubeconfig-%d", i))
			if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := New(path, 5*time.Second)
			if tt.wantNew != "" || err != nil {
				if err == nil || tt.wantNew == "" || !strings.Contains(err.Error(), tt.wantNew) {
					t.Fatalf("New: %v; want an error with %q", err, tt.wantNew)
				}
				return
			}
			if got := c.Exposure(); tt.wantExposure == "" && got != "" || !strings.Contains(got, tt.wantExposure) {
				t.Errorf("Exposure() = %q; want %q", got, tt.wantExposure)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var obj map[string]any
			err = c.Get(ctx, tt.path, &obj)
			if tt.wantGet == "" && err != nil || tt.wantGet != "" && (err == nil || !strings.Contains(err.Error(), tt.wantGet)) {
				t.Fatalf("Get: %v; want an error with %q", err, tt.wantGet)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, auth := range clearAuth {
		if auth != "" {
			t.Errorf("the plain http server was sent credentials: %q", auth)
		}
	}
}

// An answer of 429 (an API server that cannot serve yet: a custom
// resource's storage just after its definition is applied) is sent again
// after its Retry-After, as client-go does, at most maxAttempts times and
// never past the call's deadline; the body goes again whole.
func TestTooManyRequestsIsSentAgain(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	busy := 1 // answers of 429 before a 201
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		b := make([]byte, 100)
		n, _ := r.Body.Read(b)
		bodies = append(bodies, string(b[:n]))
		if len(bodies) <= busy {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"kind":"Status","message":"storage is (re)initializing"}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"metadata":{"name":"x"}}`)
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	conf := "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster: {server: " + srv.URL +
		", insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\n"
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Create(ctx, "/apis/g/v1/things", map[string]string{"a": "b"}, nil); err != nil {
		t.Fatalf("Create after one 429: %v", err)
	}
	if len(bodies) != 2 || bodies[0] != bodies[1] || bodies[1] == "" {
		t.Fatalf("the server saw %q; want the same body twice", bodies)
	}
	bodies, busy = nil, 100
	if err := c.Create(ctx, "/apis/g/v1/things", map[string]string{"a": "b"}, nil); err == nil || !strings.Contains(err.Error(), "429") || len(bodies) != maxAttempts {
		t.Fatalf("Create while the server is busy: %v after %d requests; want a 429 after %d", err, len(bodies), maxAttempts)
	}
}
