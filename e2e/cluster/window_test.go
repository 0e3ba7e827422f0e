package cluster

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// callLog is the simulator's call log inside each node (EnvCallLog).
const callLog = "/var/log/calico-ipam-calls.jsonl"

// calicoNodeRestarts is how many times the scenario starts calico-node
// again under churn.
const calicoNodeRestarts = 10

// Issue 46: calico-node starts again ten times (its installer copies its
// binaries and writes its conflist) while a Deployment's pods are deleted
// and recreated all along. The simulator logs who ran each ADD and DEL it
// served: in own-conflist mode, installed with the Helm chart, none
// reaches it without safe-ipam; takeover's count, installed from the
// manifest rendered for it, is reported beside it. A pod started before safe-ipam is
// installed is the control: its ADD is counted as unguarded.
func TestCalicoNodeRestartsWindow(t *testing.T) {
	if prepared.realCalico {
		t.Skip("the unguarded calls are counted from the simulator's call log, which a real calico-ipam does not write")
	}
	counts := map[string][2]int{}
	for _, mode := range []string{install.ModeOwnConflist, install.ModeTakeover} {
		t.Run(mode, func(t *testing.T) {
			unguarded, calls := restartsUnderChurn(t, mode)
			counts[mode] = [2]int{unguarded, calls}
			if mode == install.ModeOwnConflist && unguarded > 0 {
				t.Errorf("own-conflist mode: %d of %d calls reached calico-ipam without safe-ipam; want none", unguarded, calls)
			}
		})
	}
	t.Logf("calls that reached calico-ipam without safe-ipam across %d calico-node restarts under churn: own-conflist %d of %d, takeover %d of %d",
		calicoNodeRestarts, counts[install.ModeOwnConflist][0], counts[install.ModeOwnConflist][1], counts[install.ModeTakeover][0], counts[install.ModeTakeover][1])
}

// restartsUnderChurn installs safe-ipam in mode, restarts calico-node
// under churn, and returns how many of the ADDs and DELs calico-ipam
// served meanwhile reached it without safe-ipam, of how many.
func restartsUnderChurn(t *testing.T, mode string) (unguarded, total int) {
	ctx := testContext(t, 8*time.Minute)
	c := newCluster(t, false)
	c.waitPodsStarted(ctx, c.createPods(ctx, "control", 1))
	control := c.calicoCalls()
	if countUnguarded(control) == 0 {
		t.Fatalf("the call log counts no unguarded call of a pod started by Calico alone: %+v", control)
	}
	if mode == install.ModeOwnConflist {
		c.helmInstall(ctx, "mode="+mode)
	} else {
		c.installSafeIPAMIn(ctx, mode)
	}
	c.createDeployment(ctx, "churn", 3)
	w := c.watch(ctx, "default")
	start := len(c.calicoCalls())
	stop := c.churn(ctx, "app=churn")
	for range calicoNodeRestarts {
		c.calicoNodeStart(c.node)
		time.Sleep(1500 * time.Millisecond)
	}
	churned := stop()
	if err := c.node.WaitPodsReady(ctx, "default", "app=churn"); err != nil {
		t.Fatal(err)
	}
	calls := c.calicoCalls()[start:]
	unguarded = countUnguarded(calls)
	t.Logf("%s: %d pods deleted and recreated, %d ADDs and DELs calico-ipam served, %d of them without safe-ipam", mode, churned, len(calls), unguarded)
	if churned < calicoNodeRestarts/2 || len(calls) < churned {
		t.Errorf("%d pods churned, %d calls: too few to say the restarts met calls", churned, len(calls))
	}
	w.stop()
	if mode != install.ModeOwnConflist {
		// What the window costs, reported: a DEL that reached Calico alone
		// leaves safe-ipam's record, which fences the address Calico
		// hands out again (that pod start fails once, and is retried)
		// until gc forgets the record; the cluster goes with the test.
		t.Logf("takeover: while it ran: %v; pod starts refused: %v", w.seen(), c.sandboxFailures(ctx, "default"))
		return unguarded, len(calls)
	}
	c.requireHealthy(ctx, w)
	if err := c.kube.AppsV1().Deployments("default").Delete(ctx, "churn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.releaseAll(ctx)
	c.helmUninstall(ctx)
	return unguarded, len(calls)
}

func countUnguarded(calls []calicosim.Call) int {
	n := 0
	for _, call := range calls {
		if !call.Guarded() {
			n++
		}
	}
	return n
}

// calicoCalls is the first node's call log.
func (c *cluster) calicoCalls() []calicosim.Call {
	c.t.Helper()
	calls, err := calicosim.ReadCalls(c.node.Path(callLog))
	if err != nil {
		c.t.Fatal(err)
	}
	return calls
}

// helmUninstall takes safe-ipam off as docs/install.md's "With Helm"
// does: the chart's uninstall DaemonSet, then helm uninstall. Calico's
// files are then the node's only ones: safe-ipam's config and binaries
// are gone.
func (c *cluster) helmUninstall(ctx context.Context) {
	c.t.Helper()
	c.helm(ctx, "upgrade", "safe-ipam", chartDir, "--namespace", "kube-system", "--reuse-values", "--set", "uninstall=true")
	c.waitRollout(ctx, "safe-ipam-uninstall")
	c.helm(ctx, "uninstall", "safe-ipam", "--namespace", "kube-system", "--wait")
	for _, path := range []string{confDir + "/" + cninode.OwnConflist, binDir + "/" + builds.CNIBinary, binDir + "/" + builds.EtcdBinary} {
		if _, err := os.Stat(c.node.Path(path)); !errors.Is(err, os.ErrNotExist) {
			c.t.Errorf("after the chart's uninstall, %s is still on the node (%v)", path, err)
		}
	}
	if b, err := os.ReadFile(c.node.Path(confDir + "/10-calico.conflist")); err != nil || !bytes.Contains(b, []byte(`"calico-ipam"`)) {
		c.t.Errorf("after the chart's uninstall, Calico's conflist: %v\n%s", err, b)
	}
}

// chartDir is safe-ipam's Helm chart.
var chartDir = filepath.Join("..", "..", "deploy", "helm", "safe-ipam")

// helm runs helm against the cluster's API server.
func (c *cluster) helm(ctx context.Context, args ...string) {
	c.t.Helper()
	args = append(args, "--kubeconfig", c.node.API.Kubeconfig)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, prepared.helm, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

// helmInstall installs safe-ipam with its chart, as docs/install.md's
// "With Helm" does, with sets (key=value each), and waits as
// installSafeIPAM does.
func (c *cluster) helmInstall(ctx context.Context, sets ...string) {
	c.t.Helper()
	args := []string{"install", "safe-ipam", chartDir, "--namespace", "kube-system"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	c.helm(ctx, args...)
	c.waitRollout(ctx, "safe-ipam")
	for _, n := range c.nodes {
		if code, out := c.adminOn(ctx, n, "doctor"); code != 0 {
			c.t.Fatalf("the DaemonSet is Ready but doctor on %s exits %d:\n%s", n.Name, code, out)
		}
	}
}
