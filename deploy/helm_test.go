package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/deploy/render"
	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
)

// chart is safe-ipam's Helm chart.
const chart = "helm/safe-ipam"

// helm is the helm scripts/helm.sh builds (or $HELM), asked once per
// test binary.
func helm(t *testing.T) string {
	t.Helper()
	path, err := helmPath()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

var helmPath = sync.OnceValues(func() (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("bash", "../scripts/helm.sh")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/helm.sh: %v: %s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
})

// template renders the chart with sets (key=value each).
func template(t *testing.T, sets ...string) (string, error) {
	t.Helper()
	args := []string{"template", "safe-ipam", chart, "--namespace", "kube-system"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(helm(t), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", &helmError{err: err, stderr: stderr.String()}
	}
	return string(out), nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return e.err.Error() + ": " + e.stderr }

// objects are a multi-document YAML's objects by kind/namespace/name, as
// the API server would take them (comments, anchors and key order gone).
func objects(t *testing.T, manifests ...string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, m := range manifests {
		for _, doc := range strings.Split(m, "\n---") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("decoding %q: %v", doc, err)
			}
			if len(obj) == 0 {
				continue
			}
			meta, _ := obj["metadata"].(map[string]any)
			key := obj["kind"].(string) + "/" + str(meta["namespace"]) + "/" + str(meta["name"])
			if _, dup := out[key]; dup {
				t.Fatalf("%s twice", key)
			}
			out[key] = obj
		}
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func manifest(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Issue 46: `helm lint` passes, and `helm template` renders exactly the
// objects of deploy/'s manifests: with the default values those of
// safe-ipam.yaml and safe-ipam-claims.yaml; with other dirs, the conflist
// mode or another runtime's socket what deploy/render (or the manifest's
// own comments) makes of them; with uninstall=true the uninstall
// DaemonSet in place of safe-ipam's.
func TestChartRendersDeploysObjects(t *testing.T) {
	var stderr bytes.Buffer
	lint := exec.Command(helm(t), "lint", "--strict", chart)
	lint.Stdout, lint.Stderr = &stderr, &stderr
	if err := lint.Run(); err != nil {
		t.Fatalf("helm lint: %v:\n%s", err, stderr.String())
	}
	k3s := render.Dirs{BinDir: "/var/lib/rancher/k3s/data/current/bin", ConfDir: "/var/lib/rancher/k3s/agent/etc/cni/net.d"}
	ds, claims, uninstall := manifest(t, "safe-ipam.yaml"), manifest(t, "safe-ipam-claims.yaml"), manifest(t, "safe-ipam-uninstall.yaml")
	for _, tc := range []struct {
		name string
		sets []string
		want func() ([]string, error)
	}{
		{"defaults", nil, func() ([]string, error) { return []string{ds, claims}, nil }},
		{"no claims", []string{"claims.enabled=false"}, func() ([]string, error) { return []string{ds}, nil }},
		{"k3s dirs", []string{"cniBinDir=" + k3s.BinDir, "cniConfDir=" + k3s.ConfDir, "cri.socketDir=/run/k3s/containerd",
			"cri.endpoint=unix:///run/k3s/containerd/containerd.sock"}, func() ([]string, error) {
			m, err := render.Manifest(ds, k3s)
			return []string{strings.ReplaceAll(m, "/run/containerd", "/run/k3s/containerd"), claims}, err
		}},
		{"CRI-O", []string{"cri.socketDir=/var/run/crio", "cri.endpoint=unix:///var/run/crio/crio.sock"}, func() ([]string, error) {
			m := strings.ReplaceAll(ds, "unix:///run/containerd/containerd.sock", "unix:///var/run/crio/crio.sock")
			return []string{strings.ReplaceAll(m, "/run/containerd", "/var/run/crio"), claims}, nil
		}},
		{"conflist mode", []string{"mode=conflist"}, func() ([]string, error) {
			m, err := render.ForMode(ds, install.ModeConflist)
			return []string{m, claims}, err
		}},
		{"takeover mode", []string{"mode=takeover"}, func() ([]string, error) {
			m, err := render.ForMode(ds, install.ModeTakeover)
			return []string{m, claims}, err
		}},
		{"uninstall", []string{"uninstall=true"}, func() ([]string, error) { return []string{uninstall, claims}, nil }},
		{"uninstall, takeover mode", []string{"uninstall=true", "mode=takeover"}, func() ([]string, error) {
			m, err := render.ForMode(uninstall, install.ModeTakeover)
			return []string{m, claims}, err
		}},
		{"uninstall, conflist mode, k3s dirs", []string{"uninstall=true", "mode=conflist", "cniBinDir=" + k3s.BinDir, "cniConfDir=" + k3s.ConfDir}, func() ([]string, error) {
			m, err := render.Manifest(uninstall, k3s)
			if err != nil {
				return nil, err
			}
			m, err = render.ForMode(m, install.ModeConflist)
			return []string{m, claims}, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := template(t, tc.sets...)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			want, err := tc.want()
			if err != nil {
				t.Fatal(err)
			}
			g, w := objects(t, got), objects(t, want...)
			if !slices.Equal(sortedKeys(g), sortedKeys(w)) {
				t.Fatalf("the chart renders %v; deploy/ has %v", sortedKeys(g), sortedKeys(w))
			}
			for key, obj := range w {
				if !reflect.DeepEqual(g[key], obj) {
					gy, _ := yaml.Marshal(g[key])
					wy, _ := yaml.Marshal(obj)
					t.Errorf("%s differs:\nthe chart's:\n%s\ndeploy/'s:\n%s", key, gy, wy)
				}
			}
		})
	}
}

func sortedKeys(m map[string]map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The node settings and periods reach the commands that take them; a
// mode the chart does not know is refused, naming the value; the chart's
// version is the release's, and so is its image.
func TestChartValues(t *testing.T) {
	got, err := template(t, "store=etcd", "delegateHandles=pod", "logFile=/var/log/x.log", "gc.every=1m",
		"gc.deadNodeGrace=10m", "watch.fullCheckEvery=30m", "watch.metricsAddr=127.0.0.1:9300", "calicoConflist=05-calico.conflist")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	for _, doc := range strings.Split(got, "\n---") {
		if strings.Contains(doc, "kind: DaemonSet") {
			if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	spec := ds.Spec.Template.Spec
	spec.Containers = append(spec.Containers, spec.InitContainers...)
	settings := []string{"--store=etcd", "--delegate-handles=pod", "--log-file=/var/log/x.log"}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"install", settings},
		{"watch", append([]string{"--full-check-every=30m", "--metrics-addr=127.0.0.1:9300"}, settings...)},
		{"gc", []string{"--every=1m", "--dead-node-grace=10m", "--conf=/etc/cni/net.d/05-calico.conflist"}},
	} {
		cmd := container(t, spec, c.name).Command
		for _, w := range c.want {
			if !slices.Contains(cmd, w) {
				t.Errorf("%s runs %v; want %s in it", c.name, cmd, w)
			}
		}
	}
	if port := container(t, spec, "watch").Ports[0].ContainerPort; port != 9300 {
		t.Errorf("the watch's metrics port is %d; want 9300, its address's", port)
	}
	_, err = template(t, "mode=bogus")
	if err == nil || !strings.Contains(err.Error(), `mode "bogus": takeover, conflist or own-conflist`) {
		t.Errorf("helm template with mode=bogus: %v; want a failure naming the mode", err)
	}
	var meta struct{ Version, AppVersion string }
	if err := yaml.Unmarshal([]byte(manifest(t, filepath.Join(chart, "Chart.yaml"))), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.AppVersion != about.Release || meta.Version != about.Release {
		t.Errorf("Chart.yaml: version %s, appVersion %s; want %s (about.Release)", meta.Version, meta.AppVersion, about.Release)
	}
}
