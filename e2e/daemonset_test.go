package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 30, item 3: records written before fencing existed must get
// their address index entries at every DaemonSet start, on file-store
// nodes too; the install and watch containers mount the file store
// read-only, so they never did. Here each container of
// deploy/safe-ipam.yaml runs its own command with its own mounts (each
// host dir under a root of the test's, bind-mounted over itself in a
// private mount namespace, read-only where the manifest says so), on a
// node of Calico's Kubernetes datastore (the file store), and an
// index-less record ends up fencing its address.
func TestDaemonSetIndexesOldRecordsWithItsMounts(t *testing.T) {
	host.Require(t)
	ds := daemonSetManifest(t)
	node := &dsNode{root: t.TempDir(), safeIPAM: prepared.bin.Path(testbed.SafeIPAM)}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil {
			continue // the pod's own (the probe sockets' emptyDir): made where it is mounted
		}
		path := node.host(v.HostPath.Path)
		if kind := v.HostPath.Type; kind != nil && *kind == corev1.HostPathFileOrCreate {
			path = filepath.Dir(path) // the file is made below, as the kubelet makes it
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			t.Fatal(err)
		}
		if path != node.host(v.HostPath.Path) {
			if err := os.WriteFile(node.host(v.HostPath.Path), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(node.host("/var/log"), 0o755); err != nil {
		t.Fatal(err)
	}
	node.layOutCalico(t, ds)
	state := node.host("/var/lib/cni/safe-ipam")
	att := record.Attachment{Network: calicoNetwork, ContainerID: "old", IfName: "eth0"}
	st, err := filestore.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	old := &record.Record{Attachment: att, Node: "node1", Handle: calicoNetwork + ".old", State: record.Committed, IPs: []string{"10.244.0.7/26"}, Created: time.Now()}
	if _, err := st.Swap(context.Background(), att, nil, old); err != nil { // as before the index: no entry
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	for _, c := range spec.InitContainers {
		if out, err := node.run(t, c, 0); err != nil {
			t.Fatalf("init container %s: %v\n%s", c.Name, err, out)
		}
	}
	for _, c := range spec.Containers {
		out, _ := node.run(t, c, 5*time.Second) // long-running: stopped after a while
		t.Logf("container %s:\n%s", c.Name, out)
	}
	fenced, err := fencedBy(st, "10.244.0.7/26")
	if err != nil || fenced != "old" {
		t.Fatalf("after the DaemonSet's containers ran with its mounts, the old record's address is fenced by %q (%v); want by the old record", fenced, err)
	}
}

func daemonSetManifest(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "safe-ipam.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	return &ds
}

// dsNode is a node whose host dirs are under root.
type dsNode struct {
	root     string
	safeIPAM string
}

func (n *dsNode) host(path string) string { return filepath.Join(n.root, path) }

// layOutCalico puts Calico on the node as calico-node does, on its
// Kubernetes datastore (no etcd_endpoints), with what keeps this test's
// state under root: the node's name, and the logs and version cache.
func (n *dsNode) layOutCalico(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	tpl, err := testbed.CalicoNetworkTemplate()
	if err != nil {
		t.Fatal(err)
	}
	conf := renderForNode(t, "", n.root, tpl, func(ipam map[string]any) {
		ipam["store"] = map[string]any{"type": "file", "dir": n.host("/var/lib/cni/safe-ipam")}
	})
	installer := testbed.CalicoInstaller{Binary: prepared.bin.Path(testbed.CalicoIPAM), Main: prepared.bin.MainPlugin(), BinDir: n.host("/opt/cni/bin"), ConfDir: n.host("/etc/cni/net.d"), Network: conf}
	if err := installer.Run(); err != nil {
		t.Fatal(err)
	}
}

// run runs container c's command as the DaemonSet does, with c's mounts,
// in a private mount namespace; for a long-running one, until stop has
// passed. The image's binary is the one built here; each path the
// manifest mounts is under root, as are the paths in the command; the
// metrics ports, and the probe sockets served beside them, are left out
// (the host's).
func (n *dsNode) run(t *testing.T, c corev1.Container, stop time.Duration) (string, error) {
	t.Helper()
	var script []string
	for _, m := range c.VolumeMounts {
		dir := n.host(m.MountPath)
		if _, err := os.Stat(dir); err != nil { // an emptyDir
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		script = append(script, "mount --bind "+dir+" "+dir)
		if m.ReadOnly {
			script = append(script, "mount -o remount,bind,ro "+dir)
		}
	}
	args := []string{n.safeIPAM}
	for _, a := range c.Command[1:] {
		if strings.HasPrefix(a, "--metrics-addr=") || strings.HasPrefix(a, "--probe-socket=") {
			continue
		}
		for _, m := range c.VolumeMounts {
			a = strings.ReplaceAll(a, "="+m.MountPath, "="+n.host(m.MountPath))
			a = strings.ReplaceAll(a, "unix://"+m.MountPath, "unix://"+n.host(m.MountPath))
		}
		args = append(args, a)
	}
	script = append(script, `exec "$@"`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if stop > 0 {
		ctx, cancel = context.WithTimeout(ctx, stop)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-ec", strings.Join(script, "\n"), "sh"}, args...)...)
	out, err := cmd.CombinedOutput()
	if stop > 0 && ctx.Err() != nil {
		err = nil // stopped, as the kubelet would
	}
	return string(out), err
}

// fencedBy is the container whose record fences addr: a new record's
// commit of addr names it.
func fencedBy(st store.Store, addr string) (string, error) {
	att := record.Attachment{Network: calicoNetwork, ContainerID: "new", IfName: "eth0"}
	p := &record.Record{Attachment: att, Node: "node1", Handle: calicoNetwork + ".new", State: record.Pending, Created: time.Now()}
	ctx := context.Background()
	p, err := st.Swap(ctx, att, nil, p)
	if err != nil {
		return "", err
	}
	c := *p
	c.State, c.IPs = record.Committed, []string{addr}
	_, err = st.Commit(ctx, p, &c)
	var held *store.HeldError
	if errors.As(err, &held) {
		return held.Holder.ContainerID, nil
	}
	return "", err
}
