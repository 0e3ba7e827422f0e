package guard_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
)

// Every bad input is refused with its CNI code before the delegate or the
// store is touched.
func TestBadInputChangesNothing(t *testing.T) {
	tests := []struct {
		name  string
		env   func(delegate.Env) delegate.Env
		conf  func(r *rig) []byte
		code  uint
		field string
	}{
		{name: "malformed JSON", conf: func(*rig) []byte { return []byte(`{"name":"net1",`) }, code: types.ErrDecodingFailure},
		{name: "bad delegateHandles", conf: func(r *rig) []byte { r.handles = "namespace"; return r.conf() }, code: types.ErrInvalidNetworkConfig, field: "delegateHandles"},
		{name: "bad store", conf: func(r *rig) []byte {
			r.extraIPAM = map[string]any{"store": map[string]any{"type": "nfs"}}
			return r.conf()
		}, code: types.ErrInvalidNetworkConfig, field: "ipam.store.type"},
		{name: "container ID", env: func(e delegate.Env) delegate.Env { e.ContainerID = "a/b"; return e }, code: types.ErrInvalidEnvironmentVariables, field: "container ID"},
		{name: "empty container ID", env: func(e delegate.Env) delegate.Env { e.ContainerID = ""; return e }, code: types.ErrInvalidEnvironmentVariables, field: "container ID"},
		{name: "empty ifname", env: func(e delegate.Env) delegate.Env { e.IfName = ""; return e }, code: types.ErrInvalidEnvironmentVariables, field: "interface name"},
		{name: "long ifname", env: func(e delegate.Env) delegate.Env { e.IfName = "eth0123456789012"; return e }, code: types.ErrInvalidEnvironmentVariables, field: "interface name"},
		{name: "ifname dot", env: func(e delegate.Env) delegate.Env { e.IfName = "."; return e }, code: types.ErrInvalidEnvironmentVariables, field: "interface name"},
		{name: "ifname slash", env: func(e delegate.Env) delegate.Env { e.IfName = "x/y"; return e }, code: types.ErrInvalidEnvironmentVariables, field: "interface name"},
		{name: "ifname not UTF-8", env: func(e delegate.Env) delegate.Env { e.IfName = "eth\xff"; return e }, code: types.ErrInvalidEnvironmentVariables, field: "UTF-8"},
		{name: "CNI_ARGS", env: func(e delegate.Env) delegate.Env { e.Args = "K8S_POD_NAME=a;oops"; return e }, code: types.ErrInvalidEnvironmentVariables, field: "CNI_ARGS"},
		{name: "missing delegate", env: func(e delegate.Env) delegate.Env { e.Path = "/nonexistent"; return e }, code: types.ErrPluginNotAvailable, field: "calico-ipam"},
		{name: "delegate not executable", conf: func(r *rig) []byte {
			if err := os.WriteFile(filepath.Join(binDir, "not-executable"), []byte("#!/bin/sh\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			r.extraIPAM = map[string]any{"delegate": map[string]any{"type": "not-executable"}}
			return r.conf()
		}, code: types.ErrPluginNotAvailable, field: "not an executable"},
		{name: "delegate outside CNI_PATH", conf: func(r *rig) []byte {
			r.extraIPAM = map[string]any{"delegate": map[string]any{"type": "calico-ipam", "binDir": "/usr/bin"}}
			return r.conf()
		}, code: types.ErrInvalidNetworkConfig, field: "--delegate-outside-cni-path"},
		// Issue 42, item 1: whether the delegate may live outside CNI_PATH
		// is the node's to say, never a network config's.
		{name: "outsideCNIPath in the network config", conf: func(r *rig) []byte {
			r.extraIPAM = map[string]any{"delegate": map[string]any{"type": "calico-ipam", "binDir": "/usr/bin", "outsideCNIPath": true}}
			return r.conf()
		}, code: types.ErrInvalidNetworkConfig, field: "ipam.delegate.outsideCNIPath"},
		{name: "the node setting in the network config", conf: func(r *rig) []byte {
			r.extraIPAM = map[string]any{"delegate": map[string]any{"type": "calico-ipam", "binDir": "/usr/bin"}, "delegateOutsideCNIPath": true}
			return r.conf()
		}, code: types.ErrInvalidNetworkConfig, field: "ipam.delegateOutsideCNIPath"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, r *rig) {
				e := env("c1")
				if tt.env != nil {
					e = tt.env(e)
				}
				conf := r.conf()
				if tt.conf != nil {
					conf = tt.conf(r)
				}
				for _, verb := range []string{"ADD", "DEL"} {
					_, err := r.run(verb, e, conf)
					if cniCode(err) != tt.code || !strings.Contains(err.Error(), tt.field) {
						t.Errorf("%s: %v; want code %d naming %q", verb, err, tt.code, tt.field)
					}
				}
				for _, c := range r.calls("") {
					if c.Command != "VERSION" {
						t.Errorf("delegate called: %+v", c)
					}
				}
				if len(r.records()) != 0 {
					t.Errorf("records written: %v", r.records())
				}
			})
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	dir, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
