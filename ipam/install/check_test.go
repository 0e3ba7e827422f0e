package install

import (
	"bytes"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// etcdRequested is what install --store=etcd asks for: Calico's etcd.
var etcdRequested = Settings{"store": map[string]string{"type": config.StoreEtcd}}

// Issue 30, item 2: --store=etcd wrote {"type":"etcd"} with no endpoint,
// which the plugin refuses on every ADD and DEL. Install takes Calico's
// own etcd keys, and the plugin's parser reads the installed config with
// that etcd.
func TestInstallStoreEtcdTakesCalicosKeys(t *testing.T) {
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			if _, err := InstallWith(f.node, mc.mode, f.self, etcdRequested, false); err != nil {
				t.Fatal(err)
			}
			file, err := cninode.ReadFile(f.node.conf("10-calico.conflist"), f.node.BinDir)
			if err != nil || file.SafeIPAM == nil {
				t.Fatalf("the installed config as the plugin reads it: %+v, %v", file, err)
			}
			st := file.SafeIPAM.Store
			if st.Type != config.StoreEtcd || !slices.Equal(st.Endpoints, []string{"http://10.0.0.10:2379"}) || !slices.Contains(file.SafeIPAM.FromNode, "store") {
				t.Errorf("store %+v (from node settings: %v); want Calico's etcd, from the node settings", st, file.SafeIPAM.FromNode)
			}
		})
	}
}

// Issue 30, item 2: install refuses, changing nothing, what the plugin's
// parser would refuse: --store=etcd where Calico names no etcd (its
// Kubernetes datastore), and a node setting the parser rejects.
func TestInstallRefusesWhatThePluginRefuses(t *testing.T) {
	tests := []struct {
		name     string
		endpoint string // Calico's etcd_endpoints
		settings Settings
		want     string
	}{
		{"store=etcd on Calico's Kubernetes datastore", "", etcdRequested, "has no etcd_endpoints"},
		{"a handle mode the parser rejects", "http://10.0.0.10:2379", Settings{"delegateHandles": "podname"}, "ipam.delegateHandles"},
		{"an etcd store without endpoints", "http://10.0.0.10:2379", Settings{"store": map[string]any{"type": "etcd", "prefix": "/x"}}, "ipam.store.endpoints"},
	}
	for _, mc := range modes {
		for _, tt := range tests {
			t.Run(mc.mode.Name()+"/"+tt.name, func(t *testing.T) {
				f := newFixture(t)
				values := render(t, f.template, "1440")
				if tt.endpoint == "" {
					values = []byte(strings.Replace(string(values), `"http://10.0.0.10:2379"`, `""`, 1))
				}
				f.installer.Network = values
				must(t, f.installer.Run())
				before := f.snapshot(t)
				_, err := InstallWith(f.node, mc.mode, f.self, tt.settings, false)
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("install: %v; want a refusal naming %q", err, tt.want)
				}
				t.Logf("refused: %v", err)
				assertSame(t, "after a refused install", f.snapshot(t), before)
			})
		}
	}
}

// docs/security.md, the programs' calls: install reads and writes the
// node's files and calls nothing over the network, even with the etcd
// store, whose endpoints it only writes into the node settings: Calico's
// etcd, here a listener that counts connections, is never dialled.
func TestInstallCallsNothingOverTheNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	var dialled atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			path := f.node.conf("10-calico.conflist")
			b, err := os.ReadFile(path)
			must(t, err)
			if !bytes.Contains(b, []byte("10.0.0.10:2379")) {
				t.Fatalf("Calico's config names no etcd to point at the listener:\n%s", b)
			}
			must(t, os.WriteFile(path, bytes.ReplaceAll(b, []byte("10.0.0.10:2379"), []byte(ln.Addr().String())), 0o600))
			if _, err := InstallWith(f.node, mc.mode, f.self, etcdRequested, false); err != nil {
				t.Fatal(err)
			}
			if _, err := Install(f.node, mc.mode, f.self, false); err != nil {
				t.Fatal(err)
			}
			if n := dialled.Load(); n > 0 {
				t.Fatalf("install dialled Calico's etcd %d times", n)
			}
		})
	}
}
