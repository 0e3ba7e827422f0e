package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/deploy/render"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
)

// The manifests rendered for k3s's CNI dirs name those dirs everywhere
// the defaults were (hostPaths, mountPaths, flags), each mounted at its
// host path, and nothing of the defaults is left outside comments.
func TestRenderForOtherCNIDirs(t *testing.T) {
	if render.DefaultBinDir != install.DefaultBinDir || render.DefaultConfDir != install.DefaultConfDir {
		t.Fatal("render's defaults are not install's")
	}
	k3s := render.Dirs{BinDir: "/var/lib/rancher/k3s/data/current/bin", ConfDir: "/var/lib/rancher/k3s/agent/etc/cni/net.d"}
	for _, f := range []string{"safe-ipam.yaml", "safe-ipam-uninstall.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out, err := render.Manifest(string(b), k3s)
		if err != nil {
			t.Fatal(err)
		}
		left := regexp.MustCompile(`(^|[\s="'])(` + regexp.QuoteMeta(render.DefaultBinDir) + `|` + regexp.QuoteMeta(render.DefaultConfDir) + `)(/|$|[\s"'])`)
		for _, line := range strings.Split(out, "\n") {
			code, _, _ := strings.Cut(line, "#")
			if left.MatchString(code) {
				t.Errorf("%s: a default dir is left: %q", f, line)
			}
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(out), &ds); err != nil {
			t.Fatalf("%s rendered does not decode: %v", f, err)
		}
		spec := ds.Spec.Template.Spec
		hostPaths := map[string]string{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				hostPaths[v.Name] = v.HostPath.Path
			}
		}
		for _, want := range []string{k3s.BinDir, k3s.ConfDir} {
			found := false
			for _, p := range hostPaths {
				found = found || p == want
			}
			if !found {
				t.Errorf("%s: no volume of %s", f, want)
			}
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			for _, m := range c.VolumeMounts {
				if m.Name != probeSockets && hostPaths[m.Name] != m.MountPath {
					t.Errorf("%s: %s mounts host %s at %s", f, c.Name, hostPaths[m.Name], m.MountPath)
				}
			}
			if v := flagValue(c.Command, "cni-bin-dir"); v != "" && v != k3s.BinDir {
				t.Errorf("%s: %s --cni-bin-dir=%s", f, c.Name, v)
			}
			if v := flagValue(c.Command, "cni-conf-dir"); v != "" && v != k3s.ConfDir {
				t.Errorf("%s: %s --cni-conf-dir=%s", f, c.Name, v)
			}
		}
	}
	if _, err := render.Manifest("x", render.Dirs{BinDir: "relative/bin", ConfDir: k3s.ConfDir}); err == nil {
		t.Error("a relative dir was accepted")
	}
}

// Issue 30, item 1: the mounts follow the mode. Rendered for a mode,
// install and watch run --mode=<mode>, and they and uninstall mount the
// CNI conf dir writable in the conflist modes (they write network
// configs, uninstall removes or puts them back), read-only in takeover;
// gc's mount stays read-only, and nothing else changes.
func TestRenderForTheConflistMode(t *testing.T) {
	for _, mode := range install.ModeNames {
		for _, f := range []string{"safe-ipam.yaml", "safe-ipam-uninstall.yaml"} {
			renderedFor(t, f, mode)
		}
	}
	if _, err := render.ForMode("kind: ConfigMap\n", install.ModeConflist); err == nil {
		t.Error("a manifest with nothing to change was accepted")
	}
	if _, err := render.ForMode("- --mode=takeover\n", "bogus"); err == nil {
		t.Error("an unknown mode was accepted")
	}
}

// renderedFor checks deploy/f rendered for mode.
func renderedFor(t *testing.T, f, mode string) {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	out, err := render.ForMode(string(b), mode)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict([]byte(out), &ds); err != nil {
		t.Fatalf("%s rendered does not decode: %v", f, err)
	}
	spec := ds.Spec.Template.Spec
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		writes := (c.Name == "install" || c.Name == "watch" || c.Name == "uninstall") && mode != install.ModeTakeover
		for _, m := range c.VolumeMounts {
			if m.MountPath == install.DefaultConfDir && m.ReadOnly == writes {
				t.Errorf("%s: %s mounts %s read-only %v", f, c.Name, m.MountPath, m.ReadOnly)
			}
		}
		if got := flagValue(c.Command, "mode"); (c.Name == "install" || c.Name == "watch") && got != mode {
			t.Errorf("%s: %s runs --mode=%s, want %s", f, c.Name, got, mode)
		}
	}
	if changed := diffLines(string(b), out); changed > 4 {
		t.Errorf("%s: %d lines changed; want only the modes and the conf dir mounts", f, changed)
	}
}

func diffLines(a, b string) int {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	n := 0
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			n++
		}
	}
	return n + max(len(la), len(lb)) - min(len(la), len(lb))
}
