package lookup_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/calico/lookup"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// What the CNI binary does not read of the Kubernetes datastore is an
// error, never an answer; and nothing was connected to close.
func TestKubernetesDatastoreKeepsNodesAndHandlesUnread(t *testing.T) {
	c := lookup.New(config.Calico{DatastoreType: config.DatastoreKubernetes}, nil)
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
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) }))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	conf := "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster: {server: " + srv.URL +
		", insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\n"
	if err := os.WriteFile(kubeconfig, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	warned := map[string]string{}
	c := lookup.New(config.Calico{DatastoreType: config.DatastoreKubernetes, Kubeconfig: kubeconfig}, func(transport, why string) { warned[transport] = why })
	if a, err := c.Allocation(context.Background(), netip.MustParseAddr("10.0.0.1")); err != nil || a.Handle != "" {
		t.Fatalf("Allocation = %+v, %v; want none", a, err)
	}
	if why := warned["the Kubernetes API"]; !strings.Contains(why, "insecure-skip-tls-verify") {
		t.Errorf("warnings %v; want one for the Kubernetes API naming insecure-skip-tls-verify", warned)
	}
}
