package runtime

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness/livenesstest"
)

// runtimeBackend is a liveness source read from a real containerd: the
// CRI API itself, or the CNI result cache containerd's libcni writes.
type runtimeBackend struct {
	n   *node
	src func(n *node) liveness.Source
	uid int
	// brk makes the source unreadable.
	brk func(t *testing.T, n *node)
}

func (b *runtimeBackend) Source() liveness.Source { return b.src(b.n) }
func (b *runtimeBackend) Node() string            { return nodeName }

// Start runs a sandbox; containerd chooses its ID, and PodSandboxStatus
// gives the address.
func (b *runtimeBackend) Start(t *testing.T, namespace, name string) liveness.Running {
	b.uid++
	ctx := testContext(t)
	id := b.n.run(ctx, containerd.Pod{Namespace: namespace, Name: name, UID: podUID(name, b.uid)})
	return liveness.Running{ContainerID: id, IfName: testbed.IfName, PodNamespace: namespace, PodName: name,
		IPs: []string{b.n.ip(ctx, id).String()}}
}

// Stop stops and removes it, as the kubelet does.
func (b *runtimeBackend) Stop(t *testing.T, a liveness.Running) {
	b.n.remove(testContext(t), a.ContainerID)
}

func (b *runtimeBackend) Break(t *testing.T) { b.brk(t, b.n) }

func criSource(n *node) liveness.Source {
	return liveness.CRI{Endpoint: n.cd.Endpoint(), Node: nodeName, Timeout: 5 * time.Second}
}

func cacheSource(n *node) liveness.Source {
	return liveness.CNICache{Dir: filepath.Join(n.cniLib, "results"), Node: nodeName}
}

// The CRI source passes the liveness contract against a real containerd;
// Break stops containerd.
func TestCRISourceContract(t *testing.T) {
	livenesstest.Run(t, func(t *testing.T) livenesstest.Backend {
		return &runtimeBackend{n: newNode(t, nodeOptions{gen: testbed.Modern}), src: criSource,
			brk: func(_ *testing.T, n *node) { n.cd.Stop() }}
	})
}

// A runtime that accepts connections but does not answer (frozen) is
// unreadable once the time limit passes, never empty. CRI names no
// interfaces: every interface of a running sandbox is listed.
func TestCRISourceHungRuntimeAndInterfaces(t *testing.T) {
	n := newNode(t, nodeOptions{gen: testbed.Modern})
	b := &runtimeBackend{n: n, src: criSource}
	a := b.Start(t, "default", "web-0")
	v, err := criSource(n).Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, ifname := range []string{"eth0", "net1"} {
		if !v.ListsAttachment(a.ContainerID, ifname) {
			t.Errorf("running sandbox %s not listed for %s", containerd.Short(a.ContainerID), ifname)
		}
	}
	if v.ListsAttachment("not-a-sandbox", "eth0") {
		t.Error("an unknown container is listed")
	}
	if err := n.cd.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.cd.Thaw() }()
	src := liveness.CRI{Endpoint: n.cd.Endpoint(), Node: nodeName, Timeout: time.Second}
	if v, err := src.Read(t.Context()); err == nil {
		t.Fatalf("a frozen runtime read as %+v", v.Attachments)
	}
}

// The CNI-cache source passes the contract on the files the real
// containerd writes; Break removes the cache directory, as a wrong mount
// would hide it.
func TestCNICacheSourceOnContainerdFiles(t *testing.T) {
	livenesstest.Run(t, func(t *testing.T) livenesstest.Backend {
		n := newNode(t, nodeOptions{safe: true, gen: testbed.Modern})
		// libcni makes the directory at its first write; a node that never
		// ran a pod has none, which the source rightly cannot read.
		if err := os.MkdirAll(filepath.Join(n.cniLib, "results"), 0o700); err != nil {
			t.Fatal(err)
		}
		return &runtimeBackend{n: n, src: cacheSource,
			brk: func(t *testing.T, n *node) {
				if err := os.RemoveAll(filepath.Join(n.cniLib, "results")); err != nil {
					t.Fatal(err)
				}
			}}
	})
}

// The cache files containerd writes have the form the CNI-cache source
// reads: {"kind":"cniCacheV1","containerId","ifName","networkName",
// "cniArgs":[[k,v]...],"config":<base64>,"result":{...}}.
func TestContainerdCacheFileForm(t *testing.T) {
	n := newNode(t, nodeOptions{safe: true, gen: testbed.Modern})
	b := &runtimeBackend{n: n, src: cacheSource}
	a := b.Start(t, "default", "web-0")
	// containerd also caches its own loopback network (cni-loopback, lo).
	files, err := filepath.Glob(filepath.Join(n.cniLib, "results", networkName+"-*"))
	if err != nil || len(files) != 1 {
		t.Fatalf("cache files of %s: %v (%v), want one", networkName, files, err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var entry struct {
		Kind        string         `json:"kind"`
		ContainerID string         `json:"containerId"`
		IfName      string         `json:"ifName"`
		NetworkName string         `json:"networkName"`
		CNIArgs     [][2]string    `json:"cniArgs"`
		Config      string         `json:"config"`
		Result      map[string]any `json:"result"`
	}
	if err := json.Unmarshal(data, &entry); err != nil {
		t.Fatalf("%s: %v", files[0], err)
	}
	if entry.Kind != "cniCacheV1" || entry.ContainerID != a.ContainerID || entry.IfName != testbed.IfName || entry.NetworkName != networkName || entry.Result["ips"] == nil {
		t.Errorf("cache entry %s", data)
	}
	if conf, err := base64.StdEncoding.DecodeString(entry.Config); err != nil || !json.Valid(conf) {
		t.Errorf("config is not base64 JSON: %v", err)
	}
	args := map[string]string{}
	for _, kv := range entry.CNIArgs {
		args[kv[0]] = kv[1]
	}
	if args["K8S_POD_NAMESPACE"] != "default" || args["K8S_POD_NAME"] != "web-0" || args["K8S_POD_INFRA_CONTAINER_ID"] != a.ContainerID {
		t.Errorf("cniArgs %v", entry.CNIArgs)
	}
}
