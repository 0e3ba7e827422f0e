package liveness_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness/livenesstest"
)

// fileBackend keeps the list an operator would write.
type fileBackend struct {
	path string
	atts []liveness.Running
	n    int
}

func newFileBackend(t *testing.T) livenesstest.Backend {
	b := &fileBackend{path: filepath.Join(t.TempDir(), "live.json")}
	b.write(t)
	return b
}

func (b *fileBackend) Source() liveness.Source { return liveness.File{Path: b.path, Node: "node1"} }
func (b *fileBackend) Node() string            { return "node1" }

func (b *fileBackend) Start(t *testing.T, ns, name string) liveness.Running {
	b.n++
	a := liveness.Running{ContainerID: fmt.Sprintf("c%d", b.n), IfName: "eth0", PodNamespace: ns, PodName: name, IPs: []string{fmt.Sprintf("10.244.0.%d/26", b.n)}}
	b.atts = append(b.atts, a)
	b.write(t)
	return a
}

func (b *fileBackend) Stop(t *testing.T, a liveness.Running) {
	b.atts = slices.DeleteFunc(b.atts, func(x liveness.Running) bool { return x.ContainerID == a.ContainerID })
	b.write(t)
}

func (b *fileBackend) Break(t *testing.T) {
	if err := os.Remove(b.path); err != nil {
		t.Fatal(err)
	}
}

func (b *fileBackend) write(t *testing.T) {
	data, _ := json.Marshal(append([]liveness.Running{}, b.atts...))
	if err := os.WriteFile(b.path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// cacheBackend writes libcni's result cache files as a runtime does.
type cacheBackend struct {
	dir string
	n   int
}

func newCacheBackend(t *testing.T) livenesstest.Backend {
	return &cacheBackend{dir: t.TempDir()}
}

func (b *cacheBackend) Source() liveness.Source { return liveness.CNICache{Dir: b.dir, Node: "node1"} }
func (b *cacheBackend) Node() string            { return "node1" }

func (b *cacheBackend) Start(t *testing.T, ns, name string) liveness.Running {
	b.n++
	a := liveness.Running{Network: "k8s-pod-network", ContainerID: fmt.Sprintf("%064x", b.n), IfName: "eth0", PodNamespace: ns, PodName: name,
		IPs: []string{fmt.Sprintf("10.244.0.%d/26", b.n)}}
	// libcni's cachedInfo form, as containerd and CRI-O leave it.
	entry := fmt.Sprintf(`{"kind":"cniCacheV1","containerId":%q,"config":"e30=","ifName":"eth0","networkName":"k8s-pod-network",
		"cniArgs":[["IgnoreUnknown","1"],["K8S_POD_NAMESPACE",%q],["K8S_POD_NAME",%q],["K8S_POD_INFRA_CONTAINER_ID",%q]],
		"result":{"cniVersion":"1.0.0","ips":[{"address":%q}]}}`, a.ContainerID, ns, name, a.ContainerID, a.IPs[0])
	if err := os.WriteFile(b.entry(a), []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

func (b *cacheBackend) entry(a liveness.Running) string {
	return filepath.Join(b.dir, a.Network+"-"+a.ContainerID+"-"+a.IfName)
}

func (b *cacheBackend) Stop(t *testing.T, a liveness.Running) {
	if err := os.Remove(b.entry(a)); err != nil {
		t.Fatal(err)
	}
}

// Break leaves a half-written entry, as a crash mid-write or a wrongly
// mounted directory can.
func (b *cacheBackend) Break(t *testing.T) {
	if err := os.WriteFile(filepath.Join(b.dir, "k8s-pod-network-broken-eth0"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFileSource(t *testing.T)     { livenesstest.Run(t, newFileBackend) }
func TestCNICacheSource(t *testing.T) { livenesstest.Run(t, newCacheBackend) }

// A missing cache directory is unreadable, not empty.
func TestCNICacheMissingDir(t *testing.T) {
	if v, err := (liveness.CNICache{Dir: filepath.Join(t.TempDir(), "absent"), Node: "n"}).Read(t.Context()); err == nil {
		t.Fatalf("a missing cache read as %+v", v)
	}
}

func TestFileRejectsEntriesWithoutIdentity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.json")
	if err := os.WriteFile(path, []byte(`[{"containerID":"c1"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := (liveness.File{Path: path}).Read(t.Context()); err == nil {
		t.Fatalf("read %+v", v)
	}
}

func TestPodNamesGap(t *testing.T) {
	tests := []struct {
		name string
		live []liveness.Running
		gap  bool
	}{
		{"no entries", nil, false},
		{"pod identity", []liveness.Running{{ContainerID: "a", IfName: "eth0", PodNamespace: "ns", PodName: "p"}}, false},
		{"addresses", []liveness.Running{{ContainerID: "a", IfName: "eth0", IPs: []string{"10.0.0.1/32"}}}, false},
		{"bare address", []liveness.Running{{ContainerID: "a", IfName: "eth0", IPs: []string{"10.0.0.1"}}}, false},
		{"namespace without name", []liveness.Running{{ContainerID: "a", IfName: "eth0", PodNamespace: "ns"}}, true},
		{"unparsable address", []liveness.Running{{ContainerID: "a", IfName: "eth0", IPs: []string{"x"}}}, true},
		{"nothing", []liveness.Running{{ContainerID: "a", IfName: "eth0"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := liveness.NewView("test", "", tt.live)
			if got := v.PodNamesGap() != ""; got != tt.gap {
				t.Fatalf("gap %v (%q), want %v", got, v.PodNamesGap(), tt.gap)
			}
		})
	}
}

func TestNeedContainers(t *testing.T) {
	v := liveness.NewView("pods", "n", []liveness.Running{{PodNamespace: "ns", PodName: "p"}})
	if err := v.NeedContainers("adopt"); err != nil {
		t.Fatalf("a view that names containers refused: %v", err)
	}
	v.PodsOnly = true
	if err := v.NeedContainers("adopt"); err == nil || !strings.Contains(err.Error(), "adopt needs --cri-endpoint") {
		t.Fatalf("a pods-only view: %v; want it refused", err)
	}
}

// Under a meta-plugin (Multus) the runtime's cache holds only the
// meta-plugin's own entry; a record of the pod's net1 must not look gone.
func TestCNICacheNamesContainersNotInterfaces(t *testing.T) {
	b := newCacheBackend(t)
	a := b.Start(t, "default", "web-0")
	v, err := b.Source().Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !v.ListsAttachment(a.ContainerID, "net1") {
		t.Fatalf("an interface of a listed container looks gone: %+v", v.Attachments)
	}
}
