package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/e2e/harness/statefulset"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/admin/doctor"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
)

// calicoNetwork is the network of Calico's manifest.
const calicoNetwork = "k8s-pod-network"

// Each install mode, end to end on a node modelled on Calico's: Calico's
// rendered network config and its multi-call binary (the simulator, as
// calico and calico-ipam), put there by a model of calico-node's
// installer. safe-ipam's own CLI installs it, twice; cnitool runs the
// StatefulSet story through Calico's main plugin (a stand-in that only
// delegates to its IPAM); calico-node's installer runs again, as on a
// calico-node restart, and `install --watch` restores protection; the
// story runs again; uninstall, twice, leaves the dirs as they were.
//
// In own-conflist mode calico-node's installer undoes nothing: no call
// is unguarded during its writes (sampled every millisecond), and the
// watch has nothing to re-install.
func TestInstallModesEndToEnd(t *testing.T) {
	for _, mode := range install.ModeNames {
		t.Run(mode, func(t *testing.T) {
			ctx := testContext(t)
			c := newCluster(t, "in"+mode[:1])
			dumpOnFailure(t, c)
			if err := c.Seed(ctx, "node1"); err != nil {
				t.Fatal(err)
			}
			n := newCalicoNode(t, c)
			before := n.snapshot(t)
			for range 2 {
				n.admin(t, 0, "install", "--mode="+mode)
			}
			n.assertProtected(t, ctx)
			n.story(t, ctx, c, "a")

			watch := n.startWatch(t, mode)
			var windows []time.Duration
			for i := range 3 {
				windows = append(windows, n.calicoRestarts(t, mode, watch))
				if i == 0 {
					n.assertProtected(t, ctx)
				}
			}
			n.story(t, ctx, c, "b")
			reinstalls := len(windows)
			if mode == install.ModeOwnConflist {
				reinstalls = 0
			}
			watch.assertMetrics(t, reinstalls)
			slices.Sort(windows)
			t.Logf("%s: unprotected after each of %d calico-node restarts, from the start of Calico's writes until safe-ipam was back: %v; the watch's own log: %v",
				mode, len(windows), windows, watch.windows())
			watch.stop(t)

			for range 2 {
				n.admin(t, 0, "uninstall")
			}
			if code, out := n.doctor(); code != doctor.ExitNotProtected {
				t.Errorf("doctor after uninstall: exit %d\n%s", code, out)
			}
			assertSameFiles(t, n.snapshot(t), before)
		})
	}
}

// calicoNode is one node's CNI dirs with Calico installed.
type calicoNode struct {
	install.Node
	installer testbed.CalicoInstaller
	runner    *testbed.Node
	safeIPAM  string
}

func newCalicoNode(t *testing.T, c *testbed.Cluster) *calicoNode {
	t.Helper()
	root := filepath.Join(c.Dir, "node1")
	n := &calicoNode{Node: install.Node{BinDir: filepath.Join(root, "bin"), ConfDir: filepath.Join(root, "net.d")}, safeIPAM: c.Bin.Path(testbed.SafeIPAM)}
	for _, d := range []string{n.BinDir, n.ConfDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.installer = testbed.CalicoInstaller{Binary: c.Bin.Path(testbed.CalicoIPAM), Main: c.Bin.MainPlugin(), BinDir: n.BinDir, ConfDir: n.ConfDir, Network: calicoConfig(t, c, root)}
	if err := n.installer.Run(); err != nil {
		t.Fatal(err)
	}
	// The runtime's other plugin, and cnitool, which runs from CNI_PATH.
	for _, prog := range []string{portmap(t), c.Bin.Path(testbed.Cnitool)} {
		if err := os.Link(prog, filepath.Join(n.BinDir, filepath.Base(prog))); err != nil {
			t.Fatal(err)
		}
	}
	node := c.Node("node1", testbed.Modern)
	node.Bin, node.ConfDir = testbed.Binaries{Dir: n.BinDir}, n.ConfDir
	n.runner = node
	return n
}

// calicoConfig is Calico's cni_network_config rendered as calico-node's
// installer renders it, with what an operator would set in calico-config
// to keep this test's state in its own dirs: the node's name, Calico's
// log file, and safe-ipam's log and cache (ipam keys calico-ipam
// ignores). safe-ipam's records go to Calico's etcd, as by default.
func calicoConfig(t *testing.T, c *testbed.Cluster, root string) []byte {
	t.Helper()
	tpl, err := testbed.CalicoNetworkTemplate()
	if err != nil {
		t.Fatal(err) // the e2e suite never skips for want of it
	}
	return renderForNode(t, c.EtcdEndpoint, root, tpl, nil)
}

// renderForNode renders tpl, Calico's cni_network_config, as calico-node
// does for node1 with etcd at endpoint ("": the Kubernetes datastore), and
// keeps the node's state under root: the logs and safe-ipam's version
// cache at their usual paths below it. edit, when set, changes the ipam
// section further.
func renderForNode(t *testing.T, endpoint, root, tpl string, edit func(ipam map[string]any)) []byte {
	t.Helper()
	b, err := testbed.RenderCalicoNetwork(tpl, testbed.CalicoDefaults(endpoint))
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	calico := list["plugins"].([]any)[0].(map[string]any)
	calico["nodename"] = "node1"
	calico["log_file_path"] = filepath.Join(root, "/var/log/calico-ipam.log")
	ipam := calico["ipam"].(map[string]any)
	ipam["logFile"] = filepath.Join(root, "/var/log/safe-ipam.log")
	ipam["cacheDir"] = filepath.Join(root, "/var/lib/cni/safe-ipam/cache")
	if edit != nil {
		edit(ipam)
	}
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var portmapBuild struct {
	once sync.Once
	path string
	err  error
}

// portmap builds the reference portmap plugin, Calico's second plugin,
// once per run.
func portmap(t *testing.T) string {
	t.Helper()
	portmapBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "safe-ipam-e2e-portmap-")
		if err != nil {
			portmapBuild.err = err
			return
		}
		portmapBuild.path = filepath.Join(dir, "portmap")
		build := gobuild.Build{Out: portmapBuild.path, Pkgs: []string{"github.com/containernetworking/plugins/plugins/meta/portmap"}}
		if err := build.Run(context.Background()); err != nil {
			portmapBuild.err = fmt.Errorf("building portmap: %w", err)
		}
	})
	if portmapBuild.err != nil {
		t.Fatal(portmapBuild.err)
	}
	return portmapBuild.path
}

func (n *calicoNode) flags() []string {
	return []string{"--cni-bin-dir=" + n.BinDir, "--cni-conf-dir=" + n.ConfDir}
}

// admin runs a safe-ipam admin command and wants exit code want.
func (n *calicoNode) admin(t *testing.T, want int, args ...string) string {
	t.Helper()
	code, out := n.run(args...)
	if code != want {
		t.Fatalf("safe-ipam %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}

func (n *calicoNode) doctor() (int, string) { return n.run("doctor") }

// run runs the built safe-ipam on this node's dirs: its exit code (-1
// when it did not run) and output.
func (n *calicoNode) run(args ...string) (int, string) {
	out, err := exec.Command(n.safeIPAM, append(args, n.flags()...)...).CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return exitErr.ExitCode(), string(out)
	case err != nil:
		return -1, err.Error()
	}
	return 0, string(out)
}

func (n *calicoNode) assertProtected(t *testing.T, ctx context.Context) {
	t.Helper()
	if code, out := n.doctor(); code != doctor.ExitProtected {
		t.Fatalf("doctor: exit %d\n%s", code, out)
	}
}

// protectedNow is the cheap check the window is measured with: what a
// runtime's next call would run.
func (n *calicoNode) protectedNow(mode string) bool {
	if mode == install.ModeTakeover {
		ok, _ := cninode.IsSafeIPAM(filepath.Join(n.BinDir, install.CalicoIPAM))
		return ok
	}
	c := cninode.ReadConf(filepath.Join(n.ConfDir, "10-calico.conflist"))
	if mode == install.ModeOwnConflist {
		confs, err := cninode.ReadConfs(n.ConfDir)
		if err != nil || len(confs) == 0 {
			return false
		}
		c = confs[0] // the one the runtime reads
	}
	return c.Err == nil && len(c.Plugins) > 0 && c.Plugins[0].RoutedThroughSafeIPAM()
}

// ownConflistRestarts is calicoRestarts in own-conflist mode, where
// calico-node's installer undoes nothing: the node is sampled every
// millisecond while it writes, and every sample must find it protected;
// it returns how long it found it not (0).
func (n *calicoNode) ownConflistRestarts(t *testing.T) time.Duration {
	t.Helper()
	done := make(chan struct{})
	var unguarded time.Duration
	sampled := make(chan int)
	go func() {
		samples := 0
		last := time.Now()
		for {
			now := time.Now()
			if !n.protectedNow(install.ModeOwnConflist) {
				unguarded += now.Sub(last)
			}
			last, samples = now, samples+1
			select {
			case <-done:
				sampled <- samples
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	err := n.installer.Run()
	close(done)
	samples := <-sampled
	if err != nil {
		t.Fatal(err)
	}
	if unguarded > 0 || samples == 0 || !n.protectedNow(install.ModeOwnConflist) {
		t.Errorf("own-conflist mode: unguarded for %v of %d samples while calico-node's installer ran; want never", unguarded, samples)
	}
	return unguarded
}

// calicoRestarts runs calico-node's installer and measures how long the
// node is unprotected: from the start of its writes until safe-ipam is
// back. Polled every millisecond; the bound is the test's, not a claim.
// The watch may put safe-ipam back before the installer returns (under
// load its later writes take longer): then the restart counts as modelled
// when the watch says it restored protection.
func (n *calicoNode) calicoRestarts(t *testing.T, mode string, watch *watchProcess) time.Duration {
	t.Helper()
	if mode == install.ModeOwnConflist {
		return n.ownConflistRestarts(t)
	}
	restored := len(watch.windows())
	start := time.Now()
	if err := n.installer.Run(); err != nil {
		t.Fatal(err)
	}
	if n.protectedNow(mode) {
		deadline := time.Now().Add(10 * time.Second)
		for len(watch.windows()) == restored {
			if time.Now().After(deadline) {
				t.Fatal("calico-node's installer left the node protected, and the watch restored nothing: the restart was not modelled")
			}
			time.Sleep(time.Millisecond)
		}
		return time.Since(start)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !n.protectedNow(mode) {
		if time.Now().After(deadline) {
			t.Fatal("install --watch did not restore protection within 30s")
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// story is the StatefulSet late DEL through cnitool: web-0's sandbox A is
// replaced by B, A's DEL comes late and must leave B's address allocated,
// then B's DEL leaves nothing.
func (n *calicoNode) story(t *testing.T, ctx context.Context, c *testbed.Cluster, tag string) {
	t.Helper()
	sandbox := func(name string) testbed.Sandbox {
		ns, err := c.Netns.Add(ctx, tag+name)
		if err != nil {
			t.Fatal(err)
		}
		return testbed.Sandbox{Pod: statefulset.Pod, Netns: ns}
	}
	a, b := sandbox("a"), sandbox("b")
	addrA, addrB := n.add(t, ctx, a), n.add(t, ctx, b)
	recs, err := c.Records(ctx, calicoNetwork, testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1"))
	if err != nil || len(recs) != 2 {
		t.Fatalf("safe-ipam's records in Calico's etcd: %d, %v; want A's and B's: the calls did not go through safe-ipam", len(recs), err)
	}
	if err := n.runner.Del(ctx, calicoNetwork, a); err != nil {
		t.Fatal(err)
	}
	held := n.calicoHolds(t, ctx, c)
	if !held[addrB] || held[addrA] {
		t.Fatalf("after A's late DEL Calico holds %v; want B's %s held and A's %s released", held, addrB, addrA)
	}
	if err := n.runner.Del(ctx, calicoNetwork, b); err != nil {
		t.Fatal(err)
	}
	left, err := c.Leftovers(ctx, calicoNetwork, &testbed.SafeConfig{Store: testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1")})
	if err != nil || len(left) > 0 {
		t.Fatalf("after every DEL: %v, %v", left, err)
	}
}

func (n *calicoNode) add(t *testing.T, ctx context.Context, sb testbed.Sandbox) netip.Addr {
	t.Helper()
	res, err := n.runner.Add(ctx, calicoNetwork, sb)
	if err != nil {
		t.Fatal(err)
	}
	p, err := testbed.ResultIPv4(res)
	if err != nil {
		t.Fatal(err)
	}
	return p.Addr()
}

func (n *calicoNode) calicoHolds(t *testing.T, ctx context.Context, c *testbed.Cluster) map[netip.Addr]bool {
	t.Helper()
	snap, err := c.Calico(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := map[netip.Addr]bool{}
	for _, a := range snap.Allocations() {
		held[a.IP] = true
	}
	return held
}

// watchProcess is a running `safe-ipam install --watch`.
type watchProcess struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  []string
	done chan struct{}
	// metrics is its --metrics-addr.
	metrics string
}

func (n *calicoNode) startWatch(t *testing.T, mode string) *watchProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args := append([]string{"install", "--watch", "--mode=" + mode, "--metrics-addr=" + addr}, n.flags()...)
	w := &watchProcess{cmd: exec.Command(n.safeIPAM, args...), done: make(chan struct{}), metrics: addr}
	stderr, err := w.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go w.read(bufio.NewScanner(stderr), started)
	t.Cleanup(func() { w.stop(t) })
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("install --watch did not start watching")
	}
	return w
}

func (w *watchProcess) read(sc *bufio.Scanner, started chan struct{}) {
	defer close(w.done)
	once := sync.Once{}
	for sc.Scan() {
		w.mu.Lock()
		w.log = append(w.log, sc.Text())
		w.mu.Unlock()
		// It installs (a no-op here) right after it starts watching.
		if strings.Contains(sc.Text(), "watching") {
			once.Do(func() { close(started) })
		}
	}
}

// assertMetrics checks what the watch serves: the node protected, its
// records counted, each of restarts re-installs counted with its window,
// and /healthz answering.
func (w *watchProcess) assertMetrics(t *testing.T, restarts int) {
	t.Helper()
	get := func(path string) string {
		resp, err := http.Get("http://" + w.metrics + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// The verdict follows the watch's checks: a full one at its start
	// (retried a local period later when a source was slow to answer, as
	// on a loaded machine, and at once after a re-install when it found
	// the node not protected) and a local one after each re-install. Wait
	// for it, as a scrape a little later would see it.
	body := get("/metrics")
	for end := time.Now().Add(90 * time.Second); time.Now().Before(end) &&
		!(strings.Contains(body, "safe_ipam_protected 1") && strings.Contains(body, `safe_ipam_records{network="k8s-pod-network"}`)); {
		time.Sleep(time.Second)
		body = get("/metrics")
	}
	value := func(name string) float64 {
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		t.Errorf("the watch's metrics have no %s:\n%s", name, body)
		return -1
	}
	if v := value("safe_ipam_protected"); v != 1 {
		t.Errorf("safe_ipam_protected %v; want 1", v)
	}
	if v := value(`safe_ipam_records{network="k8s-pod-network"}`); v < 0 {
		t.Errorf("safe_ipam_records %v", v)
	}
	if v := value("safe_ipam_reinstalls_total"); v < float64(restarts) {
		t.Errorf("safe_ipam_reinstalls_total %v; want at least %d, one per calico-node restart", v, restarts)
	}
	if v := value("safe_ipam_unprotected_seconds_count"); v != value("safe_ipam_reinstalls_total") {
		t.Errorf("safe_ipam_unprotected_seconds_count %v; want one window per re-install", v)
	}
	if got := get("/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
}

// windows are the unprotected windows the watch logged.
func (w *watchProcess) windows() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, line := range w.log {
		if _, after, ok := strings.Cut(line, "unprotected_ms="); ok {
			out = append(out, strings.Fields(after)[0]+"ms")
		}
	}
	return out
}

func (w *watchProcess) stop(t *testing.T) {
	if w.cmd.ProcessState != nil {
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	<-w.done
	if err := w.cmd.Wait(); err != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Errorf("install --watch: %v\n%s", err, strings.Join(w.log, "\n"))
	}
}

// snapshot is the node's CNI dirs: every entry's mode and content.
func (n *calicoNode) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range []string{n.BinDir, n.ConfDir} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			st, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out[path] = fmt.Sprintf("%v %x", st.Mode(), b)
		}
	}
	return out
}

func assertSameFiles(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s differs from before install", k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s was not there before install", k)
		}
	}
	if t.Failed() {
		t.Logf("compared %d entries", len(want))
	}
}
