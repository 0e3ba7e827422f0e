package install

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// fixture is a node modelled on a Calico one: Calico's rendered network
// config and its multi-call binary as calico and calico-ipam, put there
// by a model of calico-node's installer, next to an unrelated plugin and
// network.
type fixture struct {
	node      Node
	self      string // a safe-ipam "binary": it carries the builds.Mark
	etcd      string // its etcd build, beside it
	installer testbed.CalicoInstaller
	template  string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{node: Node{BinDir: filepath.Join(root, "bin"), ConfDir: filepath.Join(root, "net.d")}}
	for _, d := range []string{f.node.BinDir, f.node.ConfDir} {
		must(t, os.Mkdir(d, 0o755))
	}
	f.self = writeFile(t, filepath.Join(root, "safe-ipam-build"), "#!/bin/sh\n# "+builds.Mark+"\n", 0o755)
	// The CNI binary's etcd build, which install puts beside it.
	f.etcd = writeFile(t, filepath.Join(root, builds.EtcdBinary), "#!/bin/sh\n# etcd build\n# "+builds.Mark+"\n", 0o755)
	calico := writeFile(t, filepath.Join(root, "calico-v1"), "Calico's multi-call binary, v1\n", 0o755)
	f.template = calicoTemplate(t)
	f.installer = testbed.CalicoInstaller{Binary: calico, BinDir: f.node.BinDir, ConfDir: f.node.ConfDir, Network: render(t, f.template, "1440")}
	must(t, f.installer.Run())
	writeFile(t, f.node.bin("portmap"), "portmap\n", 0o755)
	writeFile(t, f.node.conf("99-loopback.conflist"), `{"cniVersion":"1.0.0","name":"lo","plugins":[{"type":"loopback"}]}`, 0o644)
	return f
}

// calicoTemplate is Calico's cni_network_config; without the shared
// manifest the test cannot run, which under CI is a failure.
func calicoTemplate(t *testing.T) string {
	t.Helper()
	tpl, err := testbed.CalicoNetworkTemplate()
	must(t, err)
	return tpl
}

func render(t *testing.T, tpl, mtu string) []byte {
	t.Helper()
	values := testbed.CalicoDefaults("http://10.0.0.10:2379")
	values["CNI_MTU"] = mtu
	b, err := testbed.RenderCalicoNetwork(tpl, values)
	must(t, err)
	return b
}

// calicoRestarts models calico-node starting again after an upgrade: a
// new binary and a new config rendered from the template.
func (f *fixture) calicoRestarts(t *testing.T, version string) {
	t.Helper()
	f.installer.Binary = writeFile(t, filepath.Join(filepath.Dir(f.node.BinDir), "calico-"+version), "Calico's multi-call binary, "+version+"\n", 0o755)
	f.installer.Network = render(t, f.template, "1400")
	must(t, f.installer.Run())
}

// snapshot is every entry of the node's dirs: name, mode and content.
func (f *fixture) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range []string{f.node.BinDir, f.node.ConfDir} {
		entries, err := os.ReadDir(dir)
		must(t, err)
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			st, err := os.Lstat(path)
			must(t, err)
			b, _ := os.ReadFile(path)
			out[path] = fmt.Sprintf("%v %q", st.Mode(), b)
		}
	}
	return out
}

func assertSame(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: %.60s, want %.60s", k, got[k], v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: added (%.60s)", k, v))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s: the node's dirs differ:\n  %s", what, strings.Join(diffs, "\n  "))
	}
}

func writeFile(t *testing.T, path, content string, perm os.FileMode) string {
	t.Helper()
	must(t, os.WriteFile(path, []byte(content), perm))
	must(t, os.Chmod(path, perm))
	return path
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
