package install

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
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
			file, err := cninode.ReadFile(installedConf(mc, f), f.node.BinDir)
			if err != nil || file.SafeIPAM == nil {
				t.Fatalf("the installed config as the plugin reads it: %+v, %v", file, err)
			}
			st := file.SafeIPAM.Store
			if st.Type != config.StoreEtcd || !slices.Equal(st.Endpoints, []string{"http://10.0.0.10:2379"}) || !slices.Contains(file.SafeIPAM.FromNode, "store") {
				t.Errorf("store %+v (from node settings: %v); want Calico's etcd, from the node settings", st, file.SafeIPAM.FromNode)
			}
			// Issue 44, item 3: the node settings pin no endpoint, so the
			// records follow calico-config when it moves Calico's etcd (and
			// calico-node renders the config again), with no re-install.
			settings, err := os.ReadFile(f.node.bin(config.NodeSettingsFile))
			must(t, err)
			if bytes.Contains(settings, []byte("10.0.0.10")) {
				t.Errorf("the node settings pin Calico's etcd of install time:\n%s", settings)
			}
			path := f.node.conf("10-calico.conflist")
			if mc.mode.Name() == ModeTakeover {
				b, err := os.ReadFile(path)
				must(t, err)
				must(t, os.WriteFile(path, bytes.ReplaceAll(b, []byte("10.0.0.10:2379"), []byte("10.0.0.11:2379")), 0o644))
				file, err = cninode.ReadFile(path, f.node.BinDir)
				if err != nil || file.SafeIPAM == nil || !slices.Equal(file.SafeIPAM.Store.Endpoints, []string{"http://10.0.0.11:2379"}) {
					t.Errorf("after Calico's etcd moved, the plugin reads store %+v, %v; want the new endpoint", file.SafeIPAM, err)
				}
			}
		})
	}
}

// Issue 44, item 3: node settings that an earlier install pinned to
// Calico's etcd of its time are unpinned by the next install, the
// watch's included (it runs without --store), so that they follow.
func TestInstallUnpinsAnEarlierStoreEtcd(t *testing.T) {
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			pinned := `{"store":{"type":"etcd","endpoints":["http://10.0.0.9:2379"],"caFile":"/old/ca.pem"},"delegateHandles":"pod"}`
			must(t, os.WriteFile(f.node.bin(config.NodeSettingsFile), []byte(pinned), 0o644))
			if _, err := Install(f.node, mc.mode, f.self, false); err != nil {
				t.Fatal(err)
			}
			file, err := cninode.ReadFile(installedConf(mc, f), f.node.BinDir)
			if err != nil || file.SafeIPAM == nil {
				t.Fatalf("the installed config as the plugin reads it: %+v, %v", file, err)
			}
			if st := file.SafeIPAM.Store; !slices.Equal(st.Endpoints, []string{"http://10.0.0.10:2379"}) || st.CAFile == "/old/ca.pem" || file.SafeIPAM.DelegateHandles != "pod" {
				t.Errorf("store %+v, handles %q; want Calico's etcd of now, the other settings kept", st, file.SafeIPAM.DelegateHandles)
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
		{"an etcd store without endpoints, and no Calico etcd to follow", "", Settings{"store": map[string]any{"type": "etcd", "prefix": "/x"}}, "ipam.store.endpoints"},
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

// docs/security.md, "What the DaemonSet can do on a node": install (and
// the watch's re-install) write only the names the table lists. In the
// bin dir: the CNI binary (as calico-ipam in takeover mode, as safe-ipam
// in the conflist modes), safe-ipam-etcd, a kept original with its
// SHA-256 or an absence record, and the node settings; in the conf dir,
// in conflist mode, Calico's network config and the same kept original
// and sum, in own-conflist mode its own config and its absence record.
// Staged files are gone once it returns.
func TestInstallWritesOnlyWhatTheSecurityTableLists(t *testing.T) {
	kept := func(name string) bool {
		return strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".safe-ipam-orig") || strings.HasSuffix(name, ".safe-ipam-sum") || strings.HasSuffix(name, ".safe-ipam-none"))
	}
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			before := f.snapshot(t)
			settings := Settings{"delegateHandles": "pod", "store": map[string]string{"type": config.StoreEtcd}}
			if _, err := InstallWith(f.node, mc.mode, f.self, settings, false); err != nil {
				t.Fatal(err)
			}
			f.calicoRestarts(t, "v2") // and the watch puts safe-ipam back
			calicos := f.snapshot(t)
			if _, err := InstallWith(f.node, mc.mode, f.self, settings, false); err != nil {
				t.Fatal(err)
			}
			for path, now := range f.snapshot(t) {
				if before[path] == now || calicos[path] == now && before[path] != calicos[path] {
					continue // untouched, or as Calico's installer wrote it
				}
				dir, name := filepath.Dir(path), filepath.Base(path)
				var listed bool
				switch {
				case dir == f.node.BinDir:
					listed = kept(name) || name == config.NodeSettingsFile || name == builds.EtcdBinary ||
						name == CalicoIPAM && mc.mode.Name() == ModeTakeover || name == builds.CNIBinary && mc.mode.Name() != ModeTakeover
				case dir == f.node.ConfDir:
					listed = mc.mode.Name() == ModeConflist && (kept(name) || name == "10-calico.conflist") ||
						mc.mode.Name() == ModeOwnConflist && (name == cninode.OwnConflist || name == "."+cninode.OwnConflist+".safe-ipam-none")
				}
				if !listed {
					t.Errorf("install wrote %s, which docs/security.md does not list", path)
				}
			}
		})
	}
}
