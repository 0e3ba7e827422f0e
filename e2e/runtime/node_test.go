package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd/calls"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// networkName is the network the kubelet's pods join, as Calico names it.
const networkName = "k8s-pod-network"

// nodeName is Calico's name of the one node of each test.
const nodeName = "node1"

// nodeOptions choose the node's CNI chain.
type nodeOptions struct {
	// safe puts safe-ipam in front of calico-ipam; false is the control.
	safe bool
	// gen is the Calico handle generation calico-ipam uses.
	gen testbed.Generation
	// handles is safe-ipam's delegateHandles (default: container).
	handles string
	// etcdStore keeps safe-ipam's records in Calico's etcd (audit reads
	// them there); default a file store.
	etcdStore bool
	// failAdd makes the plugin after IPAM fail ADD.
	failAdd bool
	// gcGrace is safe-ipam's gcGracePeriod (default 0s).
	gcGrace string
}

// node is one Kubernetes node of a test: Calico's etcd, a containerd in
// its own namespaces with the network's conflist, and a CRI client.
type node struct {
	t       *testing.T
	opt     nodeOptions
	cluster *testbed.Cluster
	tb      *testbed.Node
	net     testbed.Network
	dir     string
	// cniLib is bind-mounted over /var/lib/cni inside; libcni's result
	// cache is its results/.
	cniLib  string
	callLog string
	holder  *containerd.Holder
	cd      *containerd.Containerd
	kube    *containerd.Kubelet
}

func newNode(t *testing.T, opt nodeOptions) *node {
	t.Helper()
	host.Require(t)
	ctx := testContext(t)
	srv := etcdtest.Start(t)
	dir := t.TempDir()
	n := &node{t: t, opt: opt, dir: dir, cniLib: filepath.Join(dir, "var-lib-cni"), callLog: filepath.Join(dir, "calls.jsonl"),
		cluster: &testbed.Cluster{Bin: prepared.bin, Etcd: srv.Client(), EtcdEndpoint: srv.Endpoint(), Dir: dir}}
	if err := n.cluster.Seed(ctx, nodeName); err != nil {
		t.Fatal(err)
	}
	n.tb = n.cluster.Node(nodeName, opt.gen)
	var safe *testbed.SafeConfig
	if opt.safe {
		var st *testbed.Store
		if opt.etcdStore {
			s := testbed.EtcdStore(srv.Endpoint(), "/safe-ipam/v1")
			st = &s
		}
		handles := opt.handles
		if handles == "" {
			handles = "container"
		}
		safe = n.cluster.SafeConfig(n.tb, handles, st)
		safe.GCGracePeriod = opt.gcGrace
	}
	n.net = n.cluster.Network(networkName, "1.0.0", n.tb, safe)
	if err := n.writeConflist(n.pluginChain(opt.failAdd, "")); err != nil {
		t.Fatal(err)
	}
	n.start(ctx, srv.Endpoint())
	t.Cleanup(n.dumpOnFailure)
	return n
}

// start brings up the holder, the etcd proxy, containerd, the sandbox
// image and the CRI client; cleanups stop them in reverse order, by PID.
// containerd's directory is short: its socket path must fit a sockaddr_un
// (108 bytes), which a test's temp dir named after the test may not.
func (n *node) start(ctx context.Context, etcdEndpoint string) {
	t := n.t
	if err := os.MkdirAll(n.cniLib, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the holder is gone.
	dir, err := os.MkdirTemp("", "sipr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h, err := containerd.StartHolder(ctx, prepared.bin.Path(pauseProgram))
	if err != nil {
		t.Fatal(err)
	}
	n.holder = h
	t.Cleanup(h.Stop)
	// libcni's cache path is fixed; the real /var/lib/cni stays untouched.
	if err := os.MkdirAll("/var/lib/cni", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := h.Run(ctx, "mount", "--bind", n.cniLib, "/var/lib/cni"); err != nil {
		t.Fatal(err)
	}
	proxy, err := containerd.StartEtcdProxy(h.NetNSPath(), etcdEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	n.cd = &containerd.Containerd{Holder: h, Dir: dir, BinDir: prepared.bin.Dir, ConfDir: n.tb.ConfDir, Env: n.pluginEnv()}
	if err := n.cd.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.cd.Stop)
	if err := containerd.ImportImage(ctx, n.cd.Socket(), prepared.image); err != nil {
		t.Fatal(err)
	}
	if n.kube, err = containerd.NewKubelet(n.cd.Endpoint(), filepath.Join(n.dir, "pods")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.kube.Close)
}

// pluginEnv is what every plugin containerd runs gets: the node's own
// calico-ipam lock, and the simulator's handle generation (a real
// calico-ipam is modern; see testbed.Generation).
func (n *node) pluginEnv() []string {
	env := append([]string{}, n.tb.Env...)
	if !prepared.bin.RealCalico {
		env = append(env, "CALICO_SIM_HANDLES="+string(n.opt.gen))
	}
	return env
}

// pluginChain is ptp (with the IPAM under test) then the recorder, which
// logs every call containerd makes and can fail ADD after IPAM allocated.
// mark, when set, tags the recorder's config so a reload can be seen.
func (n *node) pluginChain(failAdd bool, mark string) []any {
	rec := map[string]any{"type": recorderPlugin, "record": n.callLog, "failAdd": failAdd}
	if mark != "" {
		rec["mark"] = mark
	}
	return []any{n.net.PluginConfig(), rec}
}

// writeConflist writes the network's conflist at cniVersion 1.0.0:
// containerd 1.6's libcni has no 1.1.0 result type.
func (n *node) writeConflist(plugins []any) error {
	data, err := json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": networkName, "plugins": plugins}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(n.tb.ConfDir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(n.tb.ConfDir, ".10-calico.conflist.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, n.conflist())
}

// conflist is the node's CNI config file.
func (n *node) conflist() string { return filepath.Join(n.tb.ConfDir, "10-calico.conflist") }

// run starts a sandbox for pod and returns its ID.
func (n *node) run(ctx context.Context, pod containerd.Pod) string {
	n.t.Helper()
	id, err := n.kube.RunPodSandbox(ctx, pod)
	if err != nil {
		n.t.Fatal(err)
	}
	if n.opt.gen == testbed.Legacy && prepared.bin.RealCalico {
		// A real calico-ipam keys by container, as Calico 3.x does; an
		// upgraded cluster's pods carry Calico 2.x handles.
		if err := n.tb.Calico.Rekey(ctx, networkName, id, testbed.Pod{Namespace: pod.Namespace, Name: pod.Name}); err != nil {
			n.t.Fatal(err)
		}
	}
	return id
}

// ip is the sandbox's IP from PodSandboxStatus.
func (n *node) ip(ctx context.Context, id string) netip.Addr {
	n.t.Helper()
	addr, err := n.kube.IP(ctx, id)
	if err != nil {
		n.t.Fatal(err)
	}
	return addr
}

// remove stops and removes a sandbox, as the kubelet does for a deleted
// pod: two CNI DELs.
func (n *node) remove(ctx context.Context, id string) {
	n.t.Helper()
	if err := n.kube.Delete(ctx, id); err != nil {
		n.t.Fatal(err)
	}
}

// removeAll removes every sandbox the runtime knows.
func (n *node) removeAll(ctx context.Context) {
	n.t.Helper()
	sbs, err := n.kube.ListPodSandbox(ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, sb := range sbs {
		n.remove(ctx, sb.Id)
	}
}

// leftovers is what Calico and safe-ipam still hold for the network.
func (n *node) leftovers(ctx context.Context) []string {
	n.t.Helper()
	left, err := n.cluster.Leftovers(ctx, networkName, n.net.Safe)
	if err != nil {
		n.t.Fatal(err)
	}
	return left
}

// calls is every CNI call the recorder saw.
func (n *node) calls() []calls.Call {
	n.t.Helper()
	all, err := calls.Read(n.callLog)
	if err != nil {
		n.t.Fatal(err)
	}
	return all
}

// swapConflist makes containerd load plugins instead, and waits until it
// has: containerd reloads its CNI config when the file changes.
func (n *node) swapConflist(ctx context.Context, plugins []any, mark string) {
	n.t.Helper()
	if err := n.writeConflist(plugins); err != nil {
		n.t.Fatal(err)
	}
	for {
		cfg, err := n.kube.CNIConfig(ctx)
		if err != nil {
			n.t.Fatal(err)
		}
		if strings.Contains(cfg, mark) {
			return
		}
		select {
		case <-ctx.Done():
			n.t.Fatalf("containerd did not load the conflist marked %q: %s", mark, cfg)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (n *node) dumpOnFailure() {
	t := n.t
	if !t.Failed() {
		return
	}
	if snap, err := n.cluster.Calico(context.Background()); err == nil {
		for _, a := range snap.Allocations() {
			t.Logf("calico: %s held by %s %v", a.IP, a.Handle, a.Secondary)
		}
	}
	for _, log := range n.cluster.Logs() {
		t.Logf("%s", log)
	}
	for _, c := range n.calls() {
		t.Logf("cni call: %+v", c)
	}
	if n.cd != nil {
		if b, err := os.ReadFile(n.cd.LogPath()); err == nil {
			t.Logf("containerd log (last 4 KiB):\n%s", tail(b, 4096))
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// testContext bounds one test, so a hung runtime fails it rather than the
// whole run.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// podUID is a distinct UID per pod incarnation.
func podUID(name string, incarnation int) string {
	return fmt.Sprintf("uid-%s-%d", name, incarnation)
}
