// Package kubeapi reaches the Kubernetes API for the CNI binary, which
// runs on every pod start: a kubeconfig of the kinds Calico writes for its
// CNI plugin (a server, a CA, a token or a client certificate), a GET,
// and writes as strict as client-go's (a create, an update at a
// resourceVersion, a delete with preconditions). client-go would cost
// every pod start about 2 ms of package initialisation; the admin
// commands use client-go.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// ErrNotFound means the object does not exist (HTTP 404, with the API
// server's Status saying so).
var ErrNotFound = errors.New("not found")

// ErrNoResource means the API server serves no such resource (HTTP 404
// without a Status: a custom resource whose definition is not applied).
// It is not ErrNotFound: a missing resource says nothing of an object.
var ErrNoResource = errors.New("the API server serves no such resource")

// Client reaches one API server.
type Client struct {
	server   string
	token    string
	exposure string
	http     *http.Client
}

// kubeconfig is the part of a kubeconfig file Client reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string  `json:"name"`
		Cluster cluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User user   `json:"user"`
	} `json:"users"`
}

type cluster struct {
	Server                   string `json:"server"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
}

type user struct {
	Token                 string          `json:"token"`
	TokenFile             string          `json:"tokenFile"`
	ClientCertificate     string          `json:"client-certificate"`
	ClientCertificateData []byte          `json:"client-certificate-data"`
	ClientKey             string          `json:"client-key"`
	ClientKeyData         []byte          `json:"client-key-data"`
	Exec                  json.RawMessage `json:"exec"`
	AuthProvider          json.RawMessage `json:"auth-provider"`
}

// New reads the kubeconfig at path (its current context); timeout bounds
// each request. Exec plugins and auth providers are not supported.
func New(path string, timeout time.Duration) (*Client, error) {
	data, err := bounded.Read(path, bounded.Small)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, fmt.Errorf("kubeconfig %s does not parse", path)
	}
	cl, us, err := kc.current()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	server, err := url.Parse(cl.Server)
	if err != nil || cl.Server == "" || server.Host == "" || server.Scheme != "https" && server.Scheme != "http" {
		return nil, fmt.Errorf("kubeconfig %s: the cluster's server is not an http or https URL", path)
	}
	dir := filepath.Dir(path)
	tlsConf, err := cl.tls(dir)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	token, err := us.credentials(dir, tlsConf)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	// A token or client certificate sent over plain http is readable by
	// anyone on the path; client-go would send it, safe-ipam does not.
	if server.Scheme == "http" && (token != "" || len(tlsConf.Certificates) > 0) {
		return nil, fmt.Errorf("kubeconfig %s: the server %s is plain http, and safe-ipam sends no credentials in clear: use https", path, cl.Server)
	}
	return &Client{server: strings.TrimSuffix(cl.Server, "/"), token: token, exposure: exposure(server, cl),
		http: &http.Client{Timeout: timeout, CheckRedirect: sameOrigin, Transport: &http.Transport{TLSClientConfig: tlsConf, Proxy: nil}}}, nil
}

// sameOrigin follows a redirect only to the scheme and host the request
// started at: a redirect elsewhere would carry the token there (Go keeps
// the Authorization header for the same host, even from https to http).
func sameOrigin(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	if req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return fmt.Errorf("refusing a redirect from %s://%s to %s://%s: the token goes only where the kubeconfig says", first.Scheme, first.Host, req.URL.Scheme, req.URL.Host)
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// exposure says how the API server's traffic can be read or forged, for
// the warning every transport gives, or "".
func exposure(server *url.URL, cl *cluster) string {
	switch {
	case server.Scheme == "http":
		return "the Kubernetes API server " + server.Host + " is reached over plain http"
	case cl.InsecureSkipTLSVerify:
		return "the Kubernetes API server's certificate is not verified (insecure-skip-tls-verify)"
	}
	return ""
}

// Exposure says how this client's traffic to the API server can be read or
// forged (plain http, or a certificate it does not verify), or "".
func (c *Client) Exposure() string { return c.exposure }

func (kc *kubeconfig) current() (*cluster, *user, error) {
	name := kc.CurrentContext
	if name == "" && len(kc.Contexts) == 1 {
		name = kc.Contexts[0].Name
	}
	for _, c := range kc.Contexts {
		if c.Name != name {
			continue
		}
		var cl *cluster
		for i := range kc.Clusters {
			if kc.Clusters[i].Name == c.Context.Cluster {
				cl = &kc.Clusters[i].Cluster
			}
		}
		us := &user{}
		for i := range kc.Users {
			if kc.Users[i].Name == c.Context.User {
				us = &kc.Users[i].User
			}
		}
		if cl == nil {
			return nil, nil, fmt.Errorf("context %q names no cluster it lists", name)
		}
		return cl, us, nil
	}
	return nil, nil, fmt.Errorf("no context %q", name)
}

func (c *cluster) tls(dir string) (*tls.Config, error) {
	if c.InsecureSkipTLSVerify && (c.CertificateAuthority != "" || len(c.CertificateAuthorityData) > 0) {
		// client-go refuses this too: which of the two was meant?
		return nil, errors.New("certificate-authority and insecure-skip-tls-verify together: a CA is pointless when certificates are not verified; remove one")
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipTLSVerify} //nolint:gosec // as the kubeconfig says
	ca := c.CertificateAuthorityData
	if c.CertificateAuthority != "" {
		var err error
		if ca, err = bounded.Read(resolve(dir, c.CertificateAuthority), bounded.Small); err != nil {
			return nil, fmt.Errorf("certificate-authority %w", err)
		}
	}
	if len(ca) > 0 {
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(ca) {
			return nil, errors.New("certificate-authority holds no PEM certificate")
		}
	}
	return conf, nil
}

// credentials returns the bearer token, or puts the client certificate
// into conf.
func (u *user) credentials(dir string, conf *tls.Config) (string, error) {
	if len(u.Exec) > 0 && string(u.Exec) != "null" || len(u.AuthProvider) > 0 && string(u.AuthProvider) != "null" {
		return "", errors.New("the user authenticates through an exec plugin or auth provider, which safe-ipam's CNI binary does not run")
	}
	certPEM, keyPEM := u.ClientCertificateData, u.ClientKeyData
	for _, f := range []struct {
		name, path string
		dst        *[]byte
	}{{"client-certificate", u.ClientCertificate, &certPEM}, {"client-key", u.ClientKey, &keyPEM}} {
		if f.path == "" {
			continue
		}
		data, err := bounded.Read(resolve(dir, f.path), bounded.Small)
		if err != nil {
			return "", fmt.Errorf("%s %w", f.name, err)
		}
		*f.dst = data
	}
	if len(certPEM) > 0 || len(keyPEM) > 0 {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return "", errors.New("client-certificate and client-key do not make a key pair")
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	if u.TokenFile != "" {
		data, err := bounded.Read(resolve(dir, u.TokenFile), bounded.Small)
		if err != nil {
			return "", fmt.Errorf("tokenFile %w", err)
		}
		return strings.TrimSpace(string(data)), nil
	}
	return u.Token, nil
}

// resolve reads a kubeconfig's relative path from its own directory, as
// kubectl does.
func resolve(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// Errors a request maps the API server's answer to.
var (
	// ErrConflict: the object exists already (a create), or it is no
	// longer at the resourceVersion or UID the request named (HTTP 409).
	ErrConflict = errors.New("conflict")
	// ErrForbidden: the identity may not do this (HTTP 403).
	ErrForbidden = errors.New("forbidden")
)

// CloseIdleConnections closes the connections kept alive for the next
// request: a long-running caller opens a client per round.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Get reads the object at the API path into v ("/apis/<group>/<version>/
// <plural>/<name>"); a missing object is ErrNotFound, a resource the
// server does not serve ErrNoResource.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	_, err := c.do(ctx, http.MethodGet, path, nil, v)
	return err
}

// GetDated is Get, and the API server's clock when it answered (its
// Date): times compared across machines are taken from one clock, the
// server's.
func (c *Client) GetDated(ctx context.Context, path string, v any) (time.Time, error) {
	return c.do(ctx, http.MethodGet, path, nil, v)
}

// Create POSTs obj to the collection at path and reads what the server
// stored into out (nil: not read); an object of that name is ErrConflict,
// a resource the server does not serve ErrNoResource.
func (c *Client) Create(ctx context.Context, path string, obj, out any) error {
	_, err := c.do(ctx, http.MethodPost, path, obj, out)
	return err
}

// Update PUTs obj, whose metadata carries the resourceVersion it was read
// at, to the object at path, and reads what the server stored into out:
// a write since that read is ErrConflict, as client-go's Update.
func (c *Client) Update(ctx context.Context, path string, obj, out any) error {
	_, err := c.do(ctx, http.MethodPut, path, obj, out)
	return err
}

// Delete deletes the object at path if it is still the one with uid at
// resourceVersion (preconditions, as client-go's): another object of the
// name, or a write since, is ErrConflict; none at all ErrNotFound.
func (c *Client) Delete(ctx context.Context, path, uid, resourceVersion string) error {
	opts := map[string]any{"apiVersion": "v1", "kind": "DeleteOptions",
		"preconditions": map[string]string{"uid": uid, "resourceVersion": resourceVersion}}
	_, err := c.do(ctx, http.MethodDelete, path, opts, nil)
	return err
}

// do sends body (JSON; nil for none) to the API path and decodes a 2xx
// answer into out (nil: not decoded). It returns the answer's Date (zero
// when it has none).
func (c *Client) do(ctx context.Context, method, path string, body, out any) (time.Time, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return time.Time{}, fmt.Errorf("%s %s: encoding: %w", method, path, err)
		}
	}
	for attempt := 1; ; attempt++ {
		resp, data, err := c.send(ctx, method, path, payload)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s %s: %w", method, path, err)
		}
		wait, again := retryAfter(ctx, resp, attempt)
		if !again {
			date, _ := http.ParseTime(resp.Header.Get("Date"))
			return date, answer(method, path, resp, data, out)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s %s: %s, and %w", method, path, resp.Status, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// send makes one request and reads its answer, bounded.
func (c *Client) send(ctx context.Context, method, path string, payload []byte) (*http.Response, []byte, error) {
	var reader io.Reader
	if payload != nil {
		reader = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.server+path, reader)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxObject+1))
	return resp, data, err
}

// maxAttempts bounds the requests an answer of 429 repeats; maxWait, how
// long one waits, whatever Retry-After asks.
const (
	maxAttempts = 3
	maxWait     = 2 * time.Second
)

// retryAfter says whether to send again, and after how long: an API
// server answers 429 while it cannot serve yet (a custom resource's
// storage just after its definition is applied, its request limits), and
// client-go sends again after its Retry-After. Only while the deadline
// leaves room, and never for another answer: 429 means the request was
// not served, so sending it again writes nothing twice.
func retryAfter(ctx context.Context, resp *http.Response, attempt int) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests || attempt >= maxAttempts {
		return 0, false
	}
	wait := time.Second
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		wait = time.Duration(s) * time.Second
	}
	wait = min(wait, maxWait)
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
		return 0, false
	}
	return wait, true
}

// answer maps the API server's answer to the package's errors, and decodes
// a 2xx answer into out (nil: not decoded).
func answer(method, path string, resp *http.Response, data []byte, out any) error {
	switch {
	case resp.StatusCode == http.StatusNotFound && !statusNotFound(data):
		return fmt.Errorf("%s %s: %w", method, path, ErrNoResource)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, ErrNotFound)
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("%s %s: %w: %s", method, path, ErrConflict, statusMessage(data))
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%s %s: %w: %s", method, path, ErrForbidden, statusMessage(data))
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, statusMessage(data))
	case len(data) > maxObject:
		return fmt.Errorf("%s %s: larger than %d bytes", method, path, maxObject)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decoding: %w", method, path, err)
	}
	return nil
}

// statusNotFound says whether a 404's body is the API server's Status
// for a missing object (reason NotFound), as opposed to a path it does
// not serve at all.
func statusNotFound(data []byte) bool {
	var st struct {
		Kind   string `json:"kind"`
		Reason string `json:"reason"`
	}
	return json.Unmarshal(data, &st) == nil && st.Kind == "Status" && st.Reason == "NotFound"
}

// statusMessage is the message of the Status object an API server answers
// an error with, bounded, or "".
func statusMessage(data []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &st) != nil {
		return ""
	}
	if len(st.Message) > 300 {
		return st.Message[:300] + "..."
	}
	return st.Message
}

// maxObject is far above any IPAM block (a /20 block is about 300 KiB).
const maxObject = 8 << 20
