package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// A real API server, read through kubeconfigs written as Calico's
// installer writes its CNI plugin's (a server, a CA and a token), with
// the variants kubectl reads: relative files, a tokenFile.
func TestGet(t *testing.T) {
	srv := kubetest.Start(t)
	if err := srv.Namespace("default"); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(srv.Config().TLSClientConfig.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	token := srv.Config().BearerToken
	dir := t.TempDir()
	write := func(name, content string) string { return testbed.NodeFile(t, dir, name, content) }
	write("ca.crt", string(ca))
	write("token", token+"\n")
	kubeconfig := func(clusterExtra, userExtra string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: calico
contexts:
- name: calico
  context: {cluster: local, user: calico}
clusters:
- name: local
  cluster:
    server: %s
%s
users:
- name: calico
  user:
%s
`, srv.URL, clusterExtra, userExtra)
	}
	tests := []struct {
		name, conf string
		wantNew    string // an error New must give
		wantGet    string // an error Get must give
	}{
		{"CA file and token", kubeconfig("    certificate-authority: ca.crt", "    token: "+token), "", ""},
		{"tokenFile", kubeconfig("    certificate-authority: "+filepath.Join(dir, "ca.crt"), "    tokenFile: token"), "", ""},
		{"wrong token", kubeconfig("    certificate-authority: ca.crt", "    token: nope"), "", "401"},
		{"no CA: the server is not trusted", kubeconfig("", "    token: "+token), "", "certificate"},
		{"an exec plugin", kubeconfig("    certificate-authority: ca.crt", "    exec: {command: aws}"), "exec plugin", ""},
		{"a missing CA file", kubeconfig("    certificate-authority: missing.crt", "    token: x"), "certificate-authority", ""},
		{"not YAML", "{", "does not parse", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(write(fmt.Sprintf("kubeconfig-%d", i), tt.conf), 5*time.Second)
			if tt.wantNew != "" || err != nil {
				if err == nil || tt.wantNew == "" || !strings.Contains(err.Error(), tt.wantNew) {
					t.Fatalf("New: %v; want an error with %q", err, tt.wantNew)
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var ns struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			err = c.Get(ctx, "/api/v1/namespaces/default", &ns)
			if tt.wantGet != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantGet) {
					t.Fatalf("Get: %v; want an error with %q", err, tt.wantGet)
				}
				return
			}
			if err != nil || ns.Metadata.Name != "default" {
				t.Fatalf("Get = %+v, %v", ns, err)
			}
			if err := c.Get(ctx, "/api/v1/namespaces/nope", &ns); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of a missing namespace: %v; want ErrNotFound", err)
			}
		})
	}
}

// The writes are as strict as client-go's against a real API server: a
// create of an existing name, an update at an old resourceVersion and a
// delete whose preconditions no longer hold are each ErrConflict and
// change nothing; a user without the verb gets ErrForbidden.
func TestWrites(t *testing.T) {
	srv := kubetest.Start(t)
	if err := srv.Namespace("claims"); err != nil {
		t.Fatal(err)
	}
	admin, err := New(srv.Kubeconfig, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type object struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name            string `json:"name"`
			UID             string `json:"uid,omitempty"`
			ResourceVersion string `json:"resourceVersion,omitempty"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	const coll = "/api/v1/namespaces/claims/configmaps"
	obj := object{APIVersion: "v1", Kind: "ConfigMap", Data: map[string]string{"holder": "a"}}
	obj.Metadata.Name = "x"
	var first object
	if err := admin.Create(ctx, coll, obj, &first); err != nil || first.Metadata.UID == "" {
		t.Fatalf("Create = %+v, %v", first, err)
	}
	obj.Data["holder"] = "b"
	if err := admin.Create(ctx, coll, obj, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("a second Create of x: %v; want ErrConflict", err)
	}
	upd := first
	upd.Data = map[string]string{"holder": "c"}
	var second object
	if err := admin.Update(ctx, coll+"/x", upd, &second); err != nil || second.Metadata.ResourceVersion == first.Metadata.ResourceVersion {
		t.Fatalf("Update = %+v, %v", second, err)
	}
	if err := admin.Update(ctx, coll+"/x", upd, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("an Update at the old resourceVersion: %v; want ErrConflict", err)
	}
	if err := admin.Delete(ctx, coll+"/x", first.Metadata.UID, first.Metadata.ResourceVersion); !errors.Is(err, ErrConflict) {
		t.Fatalf("a Delete at the old resourceVersion: %v; want ErrConflict", err)
	}
	if err := admin.Delete(ctx, coll+"/x", "another-uid", second.Metadata.ResourceVersion); !errors.Is(err, ErrConflict) {
		t.Fatalf("a Delete of another UID: %v; want ErrConflict", err)
	}
	var now object
	if err := admin.Get(ctx, coll+"/x", &now); err != nil || now.Data["holder"] != "c" {
		t.Fatalf("after the refused writes: %+v, %v; want c's", now, err)
	}
	if err := admin.Delete(ctx, coll+"/x", second.Metadata.UID, second.Metadata.ResourceVersion); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := admin.Delete(ctx, coll+"/x", second.Metadata.UID, second.Metadata.ResourceVersion); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a second Delete: %v; want ErrNotFound", err)
	}
	kc, err := srv.User("reader", "view")
	if err != nil {
		t.Fatal(err)
	}
	reader, err := New(kc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Create(ctx, coll, obj, nil); !errors.Is(err, ErrForbidden) {
		t.Fatalf("Create by a viewer: %v; want ErrForbidden", err)
	}
	// A resource the server does not serve is not a missing object: the
	// claims read "gone" only from a missing object.
	const unserved = "/apis/nothing.example.com/v1/widgets"
	if err := admin.Get(ctx, unserved+"/x", &now); !errors.Is(err, ErrNoResource) || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an unserved resource: %v; want ErrNoResource alone", err)
	}
	if err := admin.Create(ctx, unserved, obj, nil); !errors.Is(err, ErrNoResource) {
		t.Fatalf("Create in an unserved resource: %v; want ErrNoResource", err)
	}
}
