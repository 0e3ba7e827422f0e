package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/e2e/harness/statefulset"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/admin/doctor"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
)

// Issue 30, item 2: `install --store=etcd` wrote a store without
// endpoints, and every ADD then failed (code 7). It takes Calico's etcd
// from Calico's own keys: a pod's ADD succeeds and its record is in that
// etcd.
func TestInstallStoreEtcdThenADD(t *testing.T) {
	for _, mode := range []string{install.ModeTakeover, install.ModeConflist} {
		t.Run(mode, func(t *testing.T) {
			ctx := testContext(t)
			c := newCluster(t, "ie"+mode[:1])
			dumpOnFailure(t, c)
			if err := c.Seed(ctx, "node1"); err != nil {
				t.Fatal(err)
			}
			n := newCalicoNode(t, c)
			n.admin(t, 0, "install", "--mode="+mode, "--store=etcd")
			n.assertProtected(t, ctx)
			ns, err := c.Netns.Add(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			sb := testbed.Sandbox{Pod: statefulset.Pod, Netns: ns}
			n.add(t, ctx, sb)
			n.delAtCleanup(t, ctx, sb)
			recs, err := c.Records(ctx, calicoNetwork, testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1"))
			if err != nil || len(recs) != 1 {
				t.Fatalf("records in Calico's etcd after the ADD: %d, %v; want the pod's", len(recs), err)
			}
			out := n.admin(t, 0, "uninstall")
			if !strings.Contains(out, "forgot 1 record(s)") {
				t.Errorf("uninstall:\n%s", out)
			}
		})
	}
}

// Issue 30, item 1: after the conflist route (calico-config patched, so
// calico-node itself renders safe-ipam into the config), uninstall took
// /opt/cni/bin/safe-ipam away while the config still named it, and every
// pod start failed. Now uninstall refuses, changing nothing, with the
// steps: revert calico-config (deploy/calico-config-conflist.revert.yaml),
// restart calico-node, uninstall. Followed in that order on a node laid
// out by Calico's installer, a pod starts at every step, and after
// calico-node renders its template again.
func TestUninstallAfterTheConflistPatch(t *testing.T) {
	tests := []struct {
		name string
		// patchFirst: calico-config is patched before install (as
		// docs/install.md says), else after an install that rewrote
		// Calico's config itself.
		patchFirst bool
	}{
		{"patched before install", true},
		{"patched after install", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			c := newCluster(t, "iu"+strconv.Itoa(i))
			dumpOnFailure(t, c)
			if err := c.Seed(ctx, "node1"); err != nil {
				t.Fatal(err)
			}
			n := newCalicoNode(t, c)
			podStarts := n.podStarts(t, ctx, c)
			calicoRenders := func(manifest string) {
				t.Helper()
				n.installer.Network = renderForNode(t, c.EtcdEndpoint, filepath.Dir(n.BinDir), deployTemplate(t, manifest), nil)
				if err := n.installer.Run(); err != nil {
					t.Fatal(err)
				}
			}
			if tt.patchFirst {
				calicoRenders("calico-config-conflist.patch.yaml")
			}
			n.admin(t, 0, "install", "--mode=conflist")
			if !tt.patchFirst {
				calicoRenders("calico-config-conflist.patch.yaml")
			}
			n.assertProtected(t, ctx)
			podStarts("installed")

			before := n.snapshot(t)
			out := n.admin(t, install.ExitRefused, "uninstall")
			if !strings.Contains(out, "calico-config-conflist.revert.yaml") || !strings.Contains(out, "rollout restart daemonset calico-node") {
				t.Errorf("the refusal does not give the steps:\n%s", out)
			}
			assertSameFiles(t, n.snapshot(t), before)
			podStarts("after the refused uninstall")

			calicoRenders("calico-config-conflist.revert.yaml")
			podStarts("calico-config reverted, safe-ipam still installed")
			n.admin(t, 0, "uninstall")
			podStarts("uninstalled")
			if err := n.installer.Run(); err != nil {
				t.Fatal(err)
			}
			podStarts("uninstalled, and calico-node rendered its template again")
			if code, out := n.doctor(); code != doctor.ExitNotProtected {
				t.Errorf("doctor after uninstall: exit %d\n%s", code, out)
			}
		})
	}
}

// deployTemplate is the cni_network_config of a calico-config manifest
// in deploy/.
func deployTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", name))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil || cm.Data["cni_network_config"] == "" {
		t.Fatalf("%s: no cni_network_config (%v)", name, err)
	}
	return cm.Data["cni_network_config"]
}

// Issue 30, item 1: uninstall's DaemonSet mounted the conf dir read-only
// (deploy/safe-ipam-uninstall.yaml), and on a conflist node it failed for
// ever. With the mount read-only it refuses, changing nothing, and names
// the mount to make writable; with it writable (the conflist mode's
// mounts) it restores Calico's config, and a pod starts before and after
// calico-node renders its template again.
func TestConflistUninstallFollowsTheMounts(t *testing.T) {
	ctx := testContext(t)
	c := newCluster(t, "ium")
	dumpOnFailure(t, c)
	if err := c.Seed(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	n := newCalicoNode(t, c)
	n.admin(t, 0, "install", "--mode=conflist")
	podStarts := n.podStarts(t, ctx, c)
	before := n.snapshot(t)
	unmount := bindReadOnly(t, n.ConfDir)
	out := n.admin(t, install.ExitRefused, "uninstall")
	unmount()
	if !strings.Contains(out, "readOnly: false") {
		t.Errorf("the refusal does not name the mount:\n%s", out)
	}
	assertSameFiles(t, n.snapshot(t), before)
	podStarts("after the refused uninstall")
	n.admin(t, 0, "uninstall")
	podStarts("uninstalled")
	if err := n.installer.Run(); err != nil {
		t.Fatal(err)
	}
	podStarts("uninstalled, and calico-node rendered its template again")
}

// bindReadOnly bind-mounts dir read-only over itself, as a DaemonSet's
// readOnly mount; the returned func undoes it (also at cleanup).
func bindReadOnly(t *testing.T, dir string) func() {
	t.Helper()
	for _, args := range [][]string{{"--bind", dir, dir}, {"-o", "remount,bind,ro", dir}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v: %s", args, err, out)
		}
	}
	done := false
	undo := func() {
		if done {
			return
		}
		done = true
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	}
	t.Cleanup(undo)
	return undo
}

// podStarts returns a check that a new pod's ADD succeeds on the node,
// each in a netns of its own.
func (n *calicoNode) podStarts(t *testing.T, ctx context.Context, c *testbed.Cluster) func(when string) {
	pods := 0
	return func(when string) {
		t.Helper()
		pods++
		ns, err := c.Netns.Add(ctx, "pod"+strconv.Itoa(pods))
		if err != nil {
			t.Fatal(err)
		}
		sb := testbed.Sandbox{Pod: statefulset.Pod, Netns: ns}
		if _, err := n.runner.Add(ctx, calicoNetwork, sb); err != nil {
			t.Fatalf("%s: a pod's ADD fails: %v", when, err)
		}
		n.delAtCleanup(t, ctx, sb)
	}
}

// delAtCleanup stops the pod at the test's end, as its runtime would:
// its DEL takes the host side of its dataplane away at once (a netns's
// own removal does it later, and the next test's pod, given the same
// address, would find the route taken).
func (n *calicoNode) delAtCleanup(t *testing.T, ctx context.Context, sb testbed.Sandbox) {
	t.Cleanup(func() {
		if err := n.runner.Del(ctx, calicoNetwork, sb); err != nil {
			t.Errorf("DEL at cleanup: %v", err)
		}
	})
}

// Issue 44, item 2: switching modes on a running node, the documented
// way: to conflist mode, install --mode=conflist (as the conflist
// DaemonSet's init container does); back to takeover, uninstall, then
// install --mode=takeover. A pod starts at every step, and doctor says
// protected in each mode: the conflist install on a takeover node
// refused ("uninstall that first"), and a config calico-node then
// rendered through safe-ipam named a binary that was not there.
func TestSwitchingModesKeepsPodsStarting(t *testing.T) {
	ctx := testContext(t)
	c := newCluster(t, "iswitch")
	dumpOnFailure(t, c)
	n, _ := nodeWithStore(t, ctx, c, false)
	calico := n.snapshot(t)
	podStarts := n.podStarts(t, ctx, c)
	for _, step := range [][]string{
		{"install", "--mode=" + install.ModeTakeover},
		{"install", "--mode=" + install.ModeConflist},
		{"uninstall"},
		{"install", "--mode=" + install.ModeTakeover},
		{"install", "--mode=" + install.ModeConflist},
	} {
		n.admin(t, 0, step...)
		podStarts(strings.Join(step, " "))
		if step[0] == "uninstall" {
			continue
		}
		if code, out := n.doctor(); code != doctor.ExitProtected {
			t.Fatalf("doctor after %s: exit %d\n%s", strings.Join(step, " "), code, out)
		}
	}
	n.admin(t, 0, "uninstall")
	podStarts("uninstalled")
	assertSameFiles(t, n.snapshot(t), calico)
}
