package e2e

import (
	"context"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/admin/doctor"
)

// previousRelease is the build of this repository an upgrade starts from
// and a rollback returns to: session 16's head, whose CI passed, before
// the builds' package and the grouping of ipam/ (issue 43) and issue 44.
const previousRelease = "9f9ff974c3d6681f78f2de48f4f534b6fe2b9d39"

// Issue 44, item 6: upgrade and rollback on a running node, as
// docs/install.md ("Upgrading and rolling back") says: install the
// previous release, roll to this one, back, and forward again, each with
// the install of the release rolled to. At every step doctor says
// protected, no record is lost, and a pod starts.
func TestUpgradeAndRollback(t *testing.T) {
	host.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	previous := buildRelease(t, ctx, previousRelease)
	c := newCluster(t, "uprb")
	dumpOnFailure(t, c)
	n, store := nodeWithStore(t, ctx, c, false)
	this := n.safeIPAM
	pods := map[string]testbed.Sandbox{} // by step, the pods still running
	for _, step := range []struct{ name, bin string }{
		{"the previous release", previous},
		{"upgraded", this},
		{"rolled back", previous},
		{"upgraded again", this},
	} {
		n.safeIPAM = step.bin // install and doctor of the release rolled to
		n.admin(t, 0, "install")
		if code, out := n.doctor(); code != doctor.ExitProtected {
			t.Fatalf("%s: doctor exit %d\n%s", step.name, code, out)
		}
		if step.name == "rolled back" {
			// The previous release stops a pod this one started.
			if err := n.runner.Del(ctx, calicoNetwork, pods["upgraded"]); err != nil {
				t.Fatalf("%s: DEL of the pod started upgraded: %v", step.name, err)
			}
			delete(pods, "upgraded")
		}
		want := map[string]bool{}
		for _, sb := range pods {
			want[sb.ContainerID()] = true
		}
		recs, err := c.Records(ctx, calicoNetwork, store)
		got := map[string]bool{}
		for _, r := range recs {
			got[r.Attachment.ContainerID] = true
		}
		if err != nil || !maps.Equal(got, want) {
			t.Fatalf("%s: records of %v (%v); want those of the pods running, %v", step.name, got, err, want)
		}
		sb := podSandbox(t, ctx, c, strings.ReplaceAll(step.name, " ", "-"))
		n.add(t, ctx, sb)
		pods[step.name] = sb
	}
	for _, sb := range pods {
		if err := n.runner.Del(ctx, calicoNetwork, sb); err != nil {
			t.Fatal(err)
		}
	}
}

// buildRelease builds the three programs of commit of this repository,
// from its own history, into a directory of the test's, and returns the
// CNI binary's path there.
func buildRelease(t *testing.T, ctx context.Context, commit string) string {
	t.Helper()
	root, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("finding the repository: %v", err)
	}
	src, bin := t.TempDir(), t.TempDir()
	// A shallow clone may lack the commit: fetch it from the clone's
	// origin first (a full clone has it, and fetches nothing).
	archive := exec.CommandContext(ctx, "sh", "-ec", `git -C "$1" cat-file -e "$2^{commit}" 2>/dev/null || git -C "$1" fetch -q origin "$2"
git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", strings.TrimSpace(string(root)), commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	if err := (gobuild.Build{Dir: src, Out: bin + string(filepath.Separator),
		Pkgs: []string{"./plugin/safe-ipam", "./plugin/safe-ipam-etcd", "./plugin/safe-ipam-admin"}}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(bin, testbed.SafeIPAM)
}
