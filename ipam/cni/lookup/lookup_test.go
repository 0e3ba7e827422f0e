package lookup_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/cni/lookup"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// What the CNI binary does not read of the Kubernetes datastore is an
// error, never an answer; and nothing was connected to close.
func TestKubernetesDatastoreKeepsNodesAndHandlesUnread(t *testing.T) {
	c := lookup.New(config.CalicoSettings{DatastoreType: config.DatastoreKubernetes}, nil)
	ctx := context.Background()
	if _, err := c.NodeKnown(ctx, "node1"); err == nil || !strings.Contains(err.Error(), "does not read") {
		t.Errorf("NodeKnown = %v; want an error saying it does not read the datastore", err)
	}
	if _, err := c.HandleAllocations(ctx, "default.web-0"); err == nil || !strings.Contains(err.Error(), "does not read") {
		t.Errorf("HandleAllocations = %v; want an error saying it does not read the datastore", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

// Issue 33, finding 7: the Kubernetes API client's insecure settings go
// through the same warning as etcd's, when it is first used.
func TestKubernetesAPIExposureIsWarned(t *testing.T) {
	// Every object is missing, as an API server says it (a Status): a bare
	// 404 would be a resource it does not serve.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	conf := "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster: {server: " + srv.URL +
		", insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\n"
	if err := os.WriteFile(kubeconfig, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	warned := map[string]string{}
	c := lookup.New(config.CalicoSettings{DatastoreType: config.DatastoreKubernetes, Kubeconfig: kubeconfig}, func(transport, why string) { warned[transport] = why })
	if a, err := c.Allocation(context.Background(), netip.MustParseAddr("10.0.0.1")); err != nil || a.Handle != "" {
		t.Fatalf("Allocation = %+v, %v; want none", a, err)
	}
	if why := warned["the Kubernetes API"]; !strings.Contains(why, "insecure-skip-tls-verify") {
		t.Errorf("warnings %v; want one for the Kubernetes API naming insecure-skip-tls-verify", warned)
	}
}

// Issue 42, item 4: when the binary cannot tell its own directory, the
// etcd build's name alone would be looked up on PATH, which the network
// config's environment does not choose but the node's does not vouch for
// either. The read refuses with 50 and runs nothing.
func TestTheRelayNeverRunsABuildFoundOnPath(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	script := "#!/bin/sh\n: > " + ran + "\necho '{\"known\":true}'\n"
	if err := os.WriteFile(filepath.Join(dir, "safe-ipam-etcd"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	_, err := lookup.NewRelayed("safe-ipam-etcd", config.CalicoSettings{}, nil).NodeKnown(context.Background(), "node1")
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "never runs one found on PATH") {
		t.Fatalf("read through a bare name: %v; want code 50", err)
	}
	if _, statErr := os.Stat(ran); statErr == nil {
		t.Fatal("the build found on PATH ran")
	}
}
