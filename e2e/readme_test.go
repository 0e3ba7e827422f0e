package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// The README's walk-through, run as written on a node installed the
// default way: Calico installed by its installer (its conflist, its
// binary as calico and calico-ipam), its IPPool and Node in etcd as
// calico-node creates them, safe-ipam installed by takeover. Only the
// node's paths change (the CNI dirs, /tmp/walk and the netns names). It
// runs as a reader runs it: from a clone after `make build tools` (bin/
// holds safe-ipam, safe-ipam-admin and cnitool), with the PATH the reader
// has, which holds none of them.
func TestReadmeWalkthrough(t *testing.T) {
	ctx := testContext(t)
	c := newCluster(t, "rw")
	dumpOnFailure(t, c)
	if err := c.Seed(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	n := newCalicoNode(t, c)
	n.admin(t, 0, "install")
	walk := t.TempDir()
	a, b := netnsPrefix+"rw-walk-a", netnsPrefix+"rw-walk-b"
	t.Cleanup(func() {
		for _, ns := range []string{a, b} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	script := strings.NewReplacer("/etc/cni/net.d", n.ConfDir, "/opt/cni/bin", n.BinDir, "/tmp/walk", walk, "walk-a", a, "walk-b", b).
		Replace(readmeBlock(t, "## Walk through the StatefulSet story with cnitool"))
	clone := t.TempDir()
	if err := os.Symlink(filepath.Dir(n.safeIPAM), filepath.Join(clone, "bin")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = clone
	out, err := cmd.CombinedOutput()
	t.Logf("the walk-through:\n%s\n%s", script, out)
	if err != nil {
		t.Fatalf("the README's walk-through failed: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	left, err := c.Leftovers(ctx, calicoNetwork, &testbed.SafeConfig{Store: testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("the walk-through left %v", left)
	}
}

// readmeBlock is the first ```sh block after heading in README.md.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	_, after, ok = strings.Cut(after, "```sh\n")
	block, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		t.Fatalf("README.md has no sh block under %q", heading)
	}
	return block
}
