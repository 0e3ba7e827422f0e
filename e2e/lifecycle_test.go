package e2e

import (
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
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/admin/doctor"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/etcdread"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
)

// Issue 19, item 4, end to end: node1 runs a pod with address X and dies.
// As kube-controllers does for a deleted node, Calico frees node1's
// addresses and block and deletes its Node, so node2 is handed X. No DEL
// or GC of node1 will ever come, so its safe-ipam record must not fence X
// for ever: once a sweep of `safe-ipam gc --dead-nodes` found node1 gone,
// node2's ADD settles it (or the sweeps did first). Before any sweep,
// Calico's answer alone is one sighting, which the rulebook never takes
// for proof (issue 41, item 2.8): X is fenced, as the sweep would keep
// the record. The control keeps node1's Node: X was freed behind a live
// holder's back, and stays fenced. With a file store node2 holds none of
// node1's records: nothing to settle, nothing fenced.
func TestDeadNodeRecordsDoNotFence(t *testing.T) {
	for _, tc := range []struct {
		name, tag  string
		etcdStore  bool
		nodeGone   bool
		sweeps     int // of gc --dead-nodes before node2's ADDs
		wantFenced bool
	}{
		{name: "etcd store: after a sweep found node1 gone, node2's ADD settles its record", tag: "dna", etcdStore: true, nodeGone: true, sweeps: 1},
		{name: "etcd store: gc --dead-nodes settles it first", tag: "dng", etcdStore: true, nodeGone: true, sweeps: 2},
		{name: "etcd store: node1 found gone once, by the ADD alone: X stays fenced", tag: "dn1", etcdStore: true, nodeGone: true, wantFenced: true},
		{name: "etcd store, control: node1 still known, X stays fenced", tag: "dnc", etcdStore: true, wantFenced: true},
		{name: "file store: node1's records died with it", tag: "dnf", nodeGone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			c := newCluster(t, tc.tag)
			dumpOnFailure(t, c)
			if err := c.Seed(ctx, "node1", "node2"); err != nil {
				t.Fatal(err)
			}
			var st *testbed.Store
			if tc.etcdStore {
				s := testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1")
				st = &s
			}
			n1, n2 := c.Node("node1", testbed.Modern), c.Node("node2", testbed.Modern)
			safe2 := c.SafeConfig(n2, "container", st)
			for _, n := range []*testbed.Node{n1, n2} {
				if err := c.Network(calicoNetwork, "1.0.0", n, c.SafeConfig(n, "container", st)).WriteConflist(n.ConfDir); err != nil {
					t.Fatal(err)
				}
			}
			sandbox := func(name string) testbed.Sandbox { return podSandbox(t, ctx, c, name) }

			onNode1 := sandbox("on-node1")
			x := addr(t, ctx, n1, onNode1)
			node1Dies(t, ctx, c, onNode1, tc.nodeGone)
			// Sweeps as the DaemonSet's elected gc makes them: the first
			// finds node1 gone, the second releases its records.
			gc := []string{"gc", "--conf", filepath.Join(n2.ConfDir, calicoNetwork+".conflist"),
				"--cni-bin-dir", c.Bin.Dir, "--dead-nodes", "--dead-node-grace=0s", "--apply"}
			for range tc.sweeps {
				out, code := runProgram(ctx, t, c.Bin.Path(testbed.SafeIPAM), gc...)
				if code != 0 || !strings.Contains(out, "node node1 is gone") {
					t.Fatalf("gc --dead-nodes --apply: exit %d\n%s", code, out)
				}
			}

			others, fenced, got := startUntilGiven(t, ctx, c, n2, x, 2*testbed.BlockAddrs)
			switch {
			case !got && !fenced:
				t.Fatalf("Calico never handed node2 the dead node's %s: the scenario did not happen", x)
			case fenced != tc.wantFenced:
				t.Fatalf("node2's ADD given %s: fenced %v, want %v", x, fenced, tc.wantFenced)
			}
			recs, err := c.Records(ctx, calicoNetwork, safe2.Store)
			if err != nil {
				t.Fatal(err)
			}
			node1Recs := 0
			for _, rec := range recs {
				if rec.Node == "node1" {
					node1Recs++
				}
			}
			if tc.wantFenced {
				if node1Recs != 1 || !calicoHolds(t, ctx, c, x) {
					t.Fatalf("control: node1's records %d, %s allocated %v; want the live holder's record and X quarantined", node1Recs, x, calicoHolds(t, ctx, c, x))
				}
				return
			}
			if node1Recs != 0 {
				t.Errorf("the dead node's record outlived node2's ADD of its address: %v", recs)
			}
			for _, sb := range others {
				if err := n2.Del(ctx, calicoNetwork, sb); err != nil {
					t.Fatal(err)
				}
			}
			left, err := c.Leftovers(ctx, calicoNetwork, safe2)
			if err != nil || len(left) > 0 {
				t.Errorf("after every DEL on node2: %v, %v", left, err)
			}
			if st != nil {
				if keys := etcdKeys(t, ctx, c.Etcd, "/safe-ipam/v1/"); len(keys) > 0 {
					t.Errorf("safe-ipam keys left: %v", keys)
				}
			}
		})
	}
}

// calicoAlone runs calico-ipam on node without safe-ipam: an outside
// release, or kube-controllers freeing a dead node's addresses.
func calicoAlone(t *testing.T, c *testbed.Cluster, node string) *testbed.Node {
	t.Helper()
	alone := c.Node(node, testbed.Modern)
	alone.ConfDir = filepath.Join(c.Dir, node, "calico-alone")
	if err := c.Network(calicoNetwork, "1.0.0", alone, nil).WriteConflist(alone.ConfDir); err != nil {
		t.Fatal(err)
	}
	return alone
}

// node1Dies does what kube-controllers does for a deleted node: it frees
// the node's addresses (through calico-ipam alone: safe-ipam died with
// the node) and its empty blocks and affinities; gone also deletes
// Calico's Node. The control keeps the Node: the same frees, behind a
// live holder's back.
func node1Dies(t *testing.T, ctx context.Context, c *testbed.Cluster, onNode1 testbed.Sandbox, gone bool) {
	t.Helper()
	if err := calicoAlone(t, c, "node1").Del(ctx, calicoNetwork, onNode1); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Etcd.Get(ctx, calico.HostAffinityPrefix("node1", calico.IPv4), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		_, cidr, err := calico.ParseAffinityKey(string(kv.Key))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Etcd.Delete(ctx, calico.BlockKey(cidr)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Etcd.Delete(ctx, string(kv.Key)); err != nil {
			t.Fatal(err)
		}
	}
	if gone {
		if _, err := c.Etcd.Delete(ctx, calico.NodeKey("node1")); err != nil {
			t.Fatal(err)
		}
	}
}

// startUntilGiven starts pods on n until Calico hands one x, at most
// tries: the sandboxes started, and whether the ADD given x was fenced
// (its sandbox then deleted, as the kubelet does) or started with it.
func startUntilGiven(t *testing.T, ctx context.Context, c *testbed.Cluster, n *testbed.Node, x netip.Addr, tries int) (started []testbed.Sandbox, fenced, got bool) {
	t.Helper()
	for i := 0; i <= tries && !fenced && !got; i++ {
		sb := podSandbox(t, ctx, c, fmt.Sprintf("on-%s-%d", n.Name, i))
		res, err := n.Add(ctx, calicoNetwork, sb)
		var cmdErr *testbed.CommandError
		switch {
		case err == nil:
			p, err := testbed.ResultIPv4(res)
			if err != nil {
				t.Fatal(err)
			}
			got = p.Addr() == x
			started = append(started, sb)
		case errors.As(err, &cmdErr) && strings.Contains(cmdErr.Message, "gave "+x.String()):
			fenced = true
			t.Logf("fenced: %s", cmdErr.Message)
			if err := n.Del(ctx, calicoNetwork, sb); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("ADD on %s: %v", n.Name, err)
		}
	}
	return started, fenced, got
}

// podSandbox is a new netns for pod default/name.
func podSandbox(t *testing.T, ctx context.Context, c *testbed.Cluster, name string) testbed.Sandbox {
	t.Helper()
	ns, err := c.Netns.Add(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return testbed.Sandbox{Pod: testbed.Pod{Namespace: "default", Name: name}, Netns: ns}
}

func addr(t *testing.T, ctx context.Context, n *testbed.Node, sb testbed.Sandbox) netip.Addr {
	t.Helper()
	res, err := n.Add(ctx, calicoNetwork, sb)
	if err != nil {
		t.Fatal(err)
	}
	p, err := testbed.ResultIPv4(res)
	if err != nil {
		t.Fatal(err)
	}
	return p.Addr()
}

func calicoHolds(t *testing.T, ctx context.Context, c *testbed.Cluster, a netip.Addr) bool {
	t.Helper()
	snap, err := c.Calico(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, held := snap.Lookup(a)
	return held
}

func etcdKeys(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// runProgram runs a program and returns its combined output and exit code.
func runProgram(ctx context.Context, t *testing.T, prog string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.CommandContext(ctx, prog, args...).CombinedOutput()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("%s: %v", prog, err)
	}
	code := 0
	if exitErr != nil {
		code = exitErr.ExitCode()
	}
	return string(out), code
}

// Issue 19, items 1 and 3, end to end on a node laid out as calico-node
// leaves it, in each install mode: gc and adopt take the node's own
// conflist as installed; uninstall forgets this node's records and
// releases their quarantines (nothing else would), so a pod deleted
// through Calico alone afterwards leaves nothing that fences its address
// once safe-ipam is installed again: the ADD Calico hands that address to
// succeeds, and in the end nothing at all is left. Records in Calico's etcd (the default) or in a
// file store set in calico-config.
func TestUninstallDeleteThroughCalicoReinstall(t *testing.T) {
	for _, mode := range []string{install.ModeTakeover, install.ModeConflist} {
		for _, fileStore := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, file store %v", mode, fileStore), func(t *testing.T) {
				uninstallDeleteReinstall(t, mode, fileStore)
			})
		}
	}
}

func uninstallDeleteReinstall(t *testing.T, mode string, fileStore bool) {
	ctx := testContext(t)
	c := newCluster(t, "ui"+mode[:1]+map[bool]string{false: "e", true: "f"}[fileStore])
	dumpOnFailure(t, c)
	n, store := nodeWithStore(t, ctx, c, fileStore)
	n.admin(t, 0, "install", "--mode="+mode)
	sandbox := func(name string) testbed.Sandbox { return podSandbox(t, ctx, c, name) }
	p := sandbox("p")
	x := n.add(t, ctx, p)

	conflist := filepath.Join(n.ConfDir, "10-calico.conflist")
	live := filepath.Join(c.Dir, "live.json")
	if err := os.WriteFile(live, []byte(`[{"containerID":"`+p.ContainerID()+`","ifname":"eth0"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"gc", "--conf", conflist, "--cni-bin-dir", n.BinDir, "--live", live},
		{"adopt", "--conf", conflist, "--cni-bin-dir", n.BinDir, "--live", live},
	} {
		if out, code := runProgram(ctx, t, n.safeIPAM, args...); code != 0 {
			t.Errorf("safe-ipam %s on the installed conflist: exit %d\n%s", args[0], code, out)
		}
	}

	// X is freed behind p's back, and a new pod is fenced from it: a
	// quarantine, which only safe-ipam would ever release.
	others := fenceFrom(t, ctx, c, n, p, x)

	// Released on request (the default re-claims it for p, which runs:
	// TestUninstallReclaimsForRunningHolder).
	out := n.admin(t, 0, "uninstall", "--release-quarantines")
	if want := fmt.Sprintf("forgot %d record(s)", 1+len(others)); !strings.Contains(out, want) || !strings.Contains(out, "released 1 quarantined allocation(s)") {
		t.Errorf("uninstall does not say it %s and released the quarantine:\n%s", want, out)
	}
	if calicoHolds(t, ctx, c, x) {
		t.Fatalf("uninstall left the quarantined %s allocated: nothing would ever free it", x)
	}
	if err := n.runner.Del(ctx, calicoNetwork, p); err != nil { // Calico alone now
		t.Fatal(err)
	}
	n.admin(t, 0, "install", "--mode="+mode)

	for i := 0; ; i++ {
		if i > 2*testbed.BlockAddrs {
			t.Fatalf("Calico never handed out %s again", x)
		}
		sb := sandbox(fmt.Sprintf("q%d", i))
		res, err := n.runner.Add(ctx, calicoNetwork, sb)
		if err != nil {
			t.Fatalf("ADD after re-install: %v", err)
		}
		others = append(others, sb)
		if a, err := testbed.ResultIPv4(res); err == nil && a.Addr() == x {
			break
		}
	}
	for _, sb := range others {
		if err := n.runner.Del(ctx, calicoNetwork, sb); err != nil {
			t.Fatal(err)
		}
	}
	left, err := c.Leftovers(ctx, calicoNetwork, &testbed.SafeConfig{Store: store})
	if err != nil || len(left) > 0 {
		t.Errorf("after every DEL: %v, %v", left, err)
	}
	n.admin(t, 0, "uninstall")
}

// nodeWithStore seeds node1 in Calico's data and gives it calico-node's
// install, with safe-ipam's records in a file store of the cluster's dir
// when fileStore says, else in etcd under the default prefix.
func nodeWithStore(t *testing.T, ctx context.Context, c *testbed.Cluster, fileStore bool) (*calicoNode, testbed.Store) {
	t.Helper()
	if err := c.Seed(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	n := newCalicoNode(t, c)
	store := testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1")
	if fileStore {
		store = testbed.FileStore(filepath.Join(c.Dir, "records"))
		n.setIPAM(t, "store", map[string]any{"type": "file", "dir": store.Dir})
	}
	return n, store
}

// fenceFrom frees x behind p's back through Calico alone and starts pods
// until one is handed x and fenced: its allocation is quarantined with
// p's record. It returns the pods started meanwhile.
func fenceFrom(t *testing.T, ctx context.Context, c *testbed.Cluster, n *calicoNode, p testbed.Sandbox, x netip.Addr) []testbed.Sandbox {
	t.Helper()
	if err := calicoAlone(t, c, "node1").Del(ctx, calicoNetwork, p); err != nil {
		t.Fatal(err)
	}
	var others []testbed.Sandbox
	for i := 0; ; i++ {
		if i > 2*testbed.BlockAddrs {
			t.Fatalf("Calico never handed out %s while p ran", x)
		}
		sb := podSandbox(t, ctx, c, fmt.Sprintf("f%d", i))
		_, err := n.runner.Add(ctx, calicoNetwork, sb)
		var cmdErr *testbed.CommandError
		if errors.As(err, &cmdErr) && strings.Contains(cmdErr.Message, "gave "+x.String()) {
			if err := n.runner.Del(ctx, calicoNetwork, sb); err != nil { // the kubelet's DEL of the failed sandbox
				t.Fatal(err)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, sb)
	}
	if !calicoHolds(t, ctx, c, x) {
		t.Fatalf("the fenced %s is not quarantined", x)
	}
	return others
}

// Issue 31, items 2 and 4: p runs with X, which Calico freed behind its
// back and handed to a sandbox that was fenced. Uninstall must not free X
// while p runs: it puts X back under p's own handle in Calico. Its first
// run, with etcd down, restores Calico's files and cannot forget the
// records: doctor says the node is half uninstalled, and the next run
// finishes. Records in Calico's etcd, or in a file store.
func TestUninstallReclaimsForRunningHolder(t *testing.T) {
	for _, fileStore := range []bool{false, true} {
		t.Run(fmt.Sprintf("file store %v", fileStore), func(t *testing.T) {
			ctx := testContext(t)
			c, srv := newClusterServer(t, "ur"+map[bool]string{false: "e", true: "f"}[fileStore])
			dumpOnFailure(t, c)
			n, store := nodeWithStore(t, ctx, c, fileStore)
			n.admin(t, 0, "install", "--mode="+install.ModeTakeover)
			p := podSandbox(t, ctx, c, "p")
			x := n.add(t, ctx, p)
			others := fenceFrom(t, ctx, c, n, p, x)

			srv.Pause()
			out := n.admin(t, install.ExitError, "uninstall")
			if !strings.Contains(out, "half uninstalled") {
				t.Errorf("uninstall with etcd down does not say the node is half uninstalled:\n%s", out)
			}
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
			if code, out := n.doctor(); code == doctor.ExitProtected || !strings.Contains(out, "half uninstalled") {
				t.Errorf("doctor after an uninstall cut short: exit %d, and must say half uninstalled:\n%s", code, out)
			}
			// A file store answered the first run, which forgot the records
			// it met before p's; the rest are forgotten now.
			out = n.admin(t, 0, "uninstall")
			if !strings.Contains(out, "forgot ") || !strings.Contains(out, "re-claimed 1 quarantined allocation(s)") {
				t.Errorf("uninstall run again does not say it forgot the records and re-claimed the quarantine:\n%s", out)
			}
			if _, out := n.doctor(); strings.Contains(out, "half uninstalled") {
				t.Errorf("doctor after uninstall finished still says half uninstalled:\n%s", out)
			}
			attr, held, err := etcdread.AllocationAttribute(ctx, c.Etcd, x)
			if want := calicoNetwork + "." + p.ContainerID(); err != nil || !held || attr.Handle() != want {
				t.Fatalf("after uninstall Calico holds %s: %v under %q (%v); it must be under p's handle %s: p runs with it", x, held, attr.Handle(), err, want)
			}
			for _, sb := range append(others, p) { // Calico alone now
				if err := n.runner.Del(ctx, calicoNetwork, sb); err != nil {
					t.Fatal(err)
				}
			}
			left, err := c.Leftovers(ctx, calicoNetwork, &testbed.SafeConfig{Store: store})
			if err != nil || len(left) > 0 {
				t.Errorf("after every DEL: %v, %v", left, err)
			}
		})
	}
}

// setIPAM sets key in the ipam section of Calico's network config (as in
// calico-config) and runs calico-node's installer again.
func (n *calicoNode) setIPAM(t *testing.T, key string, v any) {
	t.Helper()
	n.editCalico(t, func(plugin map[string]any) { plugin["ipam"].(map[string]any)[key] = v })
}

// setCalico sets a key of Calico's plugin in the node's network config
// and runs calico-node's installer again, as a calico-config change does.
func (n *calicoNode) setCalico(t *testing.T, key string, v any) {
	t.Helper()
	n.editCalico(t, func(plugin map[string]any) { plugin[key] = v })
}

// editCalico edits Calico's plugin in the node's network config and runs
// calico-node's installer again.
func (n *calicoNode) editCalico(t *testing.T, edit func(plugin map[string]any)) {
	t.Helper()
	var list map[string]any
	if err := json.Unmarshal(n.installer.Network, &list); err != nil {
		t.Fatal(err)
	}
	edit(list["plugins"].([]any)[0].(map[string]any))
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	n.installer.Network = out
	if err := n.installer.Run(); err != nil {
		t.Fatal(err)
	}
}

// Issue 41, item 2.3: in pod mode (delegateHandles: pod) safe-ipam has a
// Calico 2.x calico-ipam key each pod's addresses by container, and Calico
// 2.x's DEL releases namespace.podname only. Uninstall must leave Calico's
// data in the form Calico alone frees on the pod's DEL: the running pod's
// address goes under its pod-name handle, so that its DEL through Calico
// alone, once safe-ipam is gone, frees it, and nothing is left.
func TestUninstallInPodModeLeavesWhatCalicoFrees(t *testing.T) {
	ctx := testContext(t)
	c := newCluster(t, "uipod")
	dumpOnFailure(t, c)
	n, store := nodeWithStore(t, ctx, c, false)
	n.runner.Generation = testbed.Legacy
	n.setIPAM(t, "delegateHandles", "pod")
	n.admin(t, 0, "install")
	p := podSandbox(t, ctx, c, "p")
	x := n.add(t, ctx, p)
	out := n.admin(t, 0, "uninstall")
	if !strings.Contains(out, "moved the addresses of 1 record(s)") {
		t.Errorf("uninstall does not say it moved p's address under its pod's name:\n%s", out)
	}
	snap, err := c.Calico(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if held := snap.AllocationsOf("default.p"); len(held) != 1 {
		t.Fatalf("after uninstall, default.p holds %v; want p's %s", held, x)
	}
	if err := n.runner.Del(ctx, calicoNetwork, p); err != nil { // Calico 2.x alone now
		t.Fatal(err)
	}
	if calicoHolds(t, ctx, c, x) {
		t.Fatalf("p's DEL through Calico alone left %s allocated: leaked", x)
	}
	left, err := c.Leftovers(ctx, calicoNetwork, &testbed.SafeConfig{Store: store})
	if err != nil || len(left) > 0 {
		t.Errorf("after the DEL: %v, %v", left, err)
	}
}

// Issue 41, item 2.4, end to end: node1's Calico name is changed (a stale
// nodename fixed, a rename) while p and q run. p's DEL looks under the
// new name and finds no record there: calico-ipam frees X, and the DEL
// finds p's record under the old name through X's index entry (from the
// prevResult libcni passes) and releases it; kept, it would fence X for
// ever. q's sandbox is then lost (no DEL will come): the documented
// remedy, safe-ipam gc --former-node with this machine's runtime, keeps
// q's record while q runs and releases it once q is gone, and nothing is
// left.
func TestRenameRemedyReleasesTheOldNamesRecords(t *testing.T) {
	ctx := testContext(t)
	c := newCluster(t, "rnm")
	dumpOnFailure(t, c)
	if err := c.Seed(ctx, "node1", "node1b"); err != nil {
		t.Fatal(err)
	}
	n := newCalicoNode(t, c)
	// Records younger than gcGracePeriod are kept (their sandbox may not
	// be listed yet): a short one, and a wait for it below.
	n.setIPAM(t, "gcGracePeriod", "1s")
	n.admin(t, 0, "install")
	st := testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1")
	p, q := podSandbox(t, ctx, c, "p"), podSandbox(t, ctx, c, "q")
	x := n.add(t, ctx, p)
	n.add(t, ctx, q)
	oldNames := func() []string {
		recs, err := c.Records(ctx, calicoNetwork, st)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, rec := range recs {
			if rec.Node == "node1" {
				out = append(out, rec.ContainerID)
			}
		}
		return out
	}

	n.setCalico(t, "nodename", "node1b")
	n.admin(t, 0, "install")
	if err := n.runner.Del(ctx, calicoNetwork, p); err != nil {
		t.Fatal(err)
	}
	if calicoHolds(t, ctx, c, x) || slices.Contains(oldNames(), p.ContainerID()) {
		t.Fatalf("after p's DEL under the new name: Calico holds %s %v, records under node1 %v; want X free and p's record released", x, calicoHolds(t, ctx, c, x), oldNames())
	}
	if keys := etcdKeys(t, ctx, c.Etcd, etcdstore.AddressKey("/safe-ipam/v1", calicoNetwork, x.String())); len(keys) != 0 {
		t.Fatalf("X's address index entry: %v; p's DEL must release its record, which would fence X", keys)
	}

	conflist := filepath.Join(n.ConfDir, "10-calico.conflist")
	live := filepath.Join(c.Dir, "live.json")
	remedy := func(running string) string {
		time.Sleep(1100 * time.Millisecond)
		if err := os.WriteFile(live, []byte(`[{"containerID":"`+running+`","ifname":"eth0"}]`), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := runProgram(ctx, t, n.safeIPAM, "gc", "--conf", conflist, "--cni-bin-dir", n.BinDir, "--live", live, "--former-node", "node1", "--apply")
		if code != 0 {
			t.Fatalf("safe-ipam gc --former-node node1: exit %d\n%s", code, out)
		}
		return out
	}
	out := remedy(q.ContainerID())
	if got := oldNames(); !slices.Equal(got, []string{q.ContainerID()}) {
		t.Errorf("records under node1 after the remedy: %v; want q's alone (q runs)\n%s", got, out)
	}
	out = remedy("none-of-these") // q's sandbox is lost: no DEL will come
	left, err := c.Leftovers(ctx, calicoNetwork, &testbed.SafeConfig{Store: st})
	if err != nil || len(left) > 0 {
		t.Errorf("after p's DEL and the remedy once q is gone: %v, %v\n%s", left, err, out)
	}
	n.admin(t, 0, "uninstall")
}

// Issue 44, item 4: an uninstall cut short (etcd down: exit 2, the node
// half uninstalled) can be abandoned. Installing again cancels it and
// says so: the records it was to forget stay and fence again, doctor
// says protected (it said half uninstalled for ever, and the only remedy,
// uninstall, is refused while the DaemonSet's watch runs).
func TestInstallCancelsAnUnfinishedUninstall(t *testing.T) {
	ctx := testContext(t)
	c, srv := newClusterServer(t, "ucancel")
	dumpOnFailure(t, c)
	n, store := nodeWithStore(t, ctx, c, false)
	n.admin(t, 0, "install")
	p := podSandbox(t, ctx, c, "p")
	n.add(t, ctx, p)

	srv.Pause()
	n.admin(t, install.ExitError, "uninstall")
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if code, out := n.doctor(); code == doctor.ExitProtected || !strings.Contains(out, "half uninstalled") {
		t.Fatalf("doctor after an uninstall cut short: exit %d, and must say half uninstalled:\n%s", code, out)
	}
	out := n.admin(t, 0, "install")
	if !strings.Contains(out, "cancel an unfinished uninstall of network(s) "+calicoNetwork) {
		t.Errorf("install does not say it cancelled the unfinished uninstall:\n%s", out)
	}
	if code, out := n.doctor(); code != doctor.ExitProtected || strings.Contains(out, "half uninstalled") {
		t.Errorf("doctor after install cancelled the uninstall: exit %d; want protected:\n%s", code, out)
	}
	recs, err := c.Records(ctx, calicoNetwork, store)
	if err != nil || len(recs) != 1 || recs[0].Attachment.ContainerID != p.ContainerID() {
		t.Fatalf("records after the cancelled uninstall: %v, %v; want p's", recs, err)
	}
}
