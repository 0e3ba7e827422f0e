package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/safe-ipam/safe-ipam/deploy/render"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubenode"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

const (
	// nodeName is the one node's name, in Kubernetes and in Calico.
	nodeName = "node1"
	// network is the name in Calico's conflist.
	network = "k8s-pod-network"
	// manifest and uninstallManifest are the project's, applied as written
	// (own-conflist mode) or rendered for another mode (manifestFor).
	manifest          = "../../deploy/safe-ipam.yaml"
	claimsManifest    = "../../deploy/safe-ipam-claims.yaml"
	uninstallManifest = "../../deploy/safe-ipam-uninstall.yaml"
	// Where calico-node and safe-ipam keep their files on a node.
	binDir      = "/opt/cni/bin"
	confDir     = "/etc/cni/net.d"
	conflist    = confDir + "/10-calico.conflist"
	criEndpoint = "unix:///run/containerd/containerd.sock"
)

// cluster is one test's cluster with Calico installed on its nodes.
type cluster struct {
	t *testing.T
	// node is the first node: the one-node suite's only one.
	node  *kubenode.Node
	nodes []*kubenode.Node
	kube  kubernetes.Interface
	// calico reads and seeds Calico's data in the API server's etcd.
	calico *testbed.Cluster
	// legacy makes the simulator key by pod name, as Calico 2.x did.
	legacy bool
	// rekeyWeb0 moves each web-0's allocation to its pod-name handle once
	// it runs: Calico 2.x keying, with a real (3.x) calico-ipam.
	rekeyWeb0 bool
	// calicoNames are nodes' Calico names where they are not their
	// Kubernetes names: a stale identity (Calico issue 12257).
	calicoNames map[string]string
	// dead are the nodes the test killed: their pods run no more, whatever
	// the API server says until the pod GC deletes them.
	mu   sync.Mutex
	dead map[string]bool
	// gcEvery, when set, replaces the gc container's --every (5m in the
	// manifest) and --dead-node-grace (4m) with it and twice it (and, on
	// Calico's Kubernetes datastore, sets --quarantine-grace to twice it),
	// as an operator edits the DaemonSet: the tests cannot wait minutes.
	gcEvery time.Duration
	// kdd: Calico's data is in the Kubernetes API (datastore_type
	// kubernetes), safe-ipam's records in each node's file store, and its
	// cluster-wide claims in the API (deploy/safe-ipam-claims.yaml).
	kdd bool
	// mode is the install mode safe-ipam's DaemonSets run in (deploy/'s
	// own, own-conflist, unless installSafeIPAMIn said another).
	mode string
}

// newCluster starts a one-node cluster, as newClusterOf does.
func newCluster(t *testing.T, legacy bool) *cluster {
	t.Helper()
	return newClusterOf(t, legacy, []string{nodeName}, 0)
}

// newClusterOf starts a cluster of the named nodes (grace: the
// controller-manager's node monitor grace period, 0 its 3 minutes), seeds
// Calico's data, installs Calico on every node as calico-node's installer
// does, and waits for the nodes to be Ready.
func newClusterOf(t *testing.T, legacy bool, names []string, grace time.Duration) *cluster {
	t.Helper()
	return newClusterOn(t, legacy, names, grace, false)
}

// newClusterOn is newClusterOf with Calico's data on the Kubernetes
// datastore when kdd is set (its CRDs applied, its pool seeded there).
func newClusterOn(t *testing.T, legacy bool, names []string, grace time.Duration, kdd bool) *cluster {
	t.Helper()
	host.Require(t)
	ctx := testContext(t, time.Duration(2+len(names))*time.Minute)
	var env []string
	if legacy && !prepared.realCalico {
		env = append(env, "CALICO_SIM_HANDLES=legacy")
	}
	if !prepared.realCalico {
		env = append(env, calicosim.EnvCallLog+"="+callLog)
	}
	kc := kubenode.StartCluster(t, kubenode.ClusterOptions{Names: names, NodeMonitorGracePeriod: grace,
		Node: kubenode.Options{Pause: prepared.pause, SandboxImage: kubenode.PauseImage, Images: prepared.images, Env: env}})
	n := kc.Nodes[0]
	c := &cluster{t: t, node: n, nodes: kc.Nodes, kube: kc.API.Client(), legacy: legacy, kdd: kdd,
		calico: &testbed.Cluster{Etcd: kc.API.Etcd().Client(), EtcdEndpoint: n.EtcdEndpoint(), Dir: t.TempDir()}}
	if kdd {
		for _, crds := range []string{calicodata.CRDs, calicodata.KubeControllersCRDs} {
			if err := kc.API.Apply(calicodata.Require(t, crds)); err != nil {
				t.Fatal(err)
			}
		}
		c.calico.Datastore = testbed.KubeDatastore{Config: kc.API.Config(), Kubeconfig: kc.API.Kubeconfig}
	}
	if err := c.calico.Seed(ctx, names...); err != nil {
		t.Fatal(err)
	}
	if err := c.seedClusterInformation(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		c.installCalico(n)
	}
	if err := kc.WaitReady(ctx); err != nil {
		t.Fatalf("nodes not Ready: %v", err)
	}
	t.Cleanup(c.dumpOnFailure)
	return c
}

// installCalico does what calico-node does on a node before any pod
// starts: the node name file, Calico's kubeconfig, the plugins, and the
// multi-call binary with its conflist (calicoNodeStart), under the node's
// Calico name.
func (c *cluster) installCalico(n *kubenode.Node) {
	t := c.t
	t.Helper()
	kubeconfig, err := selfContained(n.API.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"/var/lib/calico/nodename":     []byte(c.calicoName(n)),
		confDir + "/calico-kubeconfig": kubeconfig,
	}
	for path, data := range files {
		if err := os.WriteFile(n.Path(path), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range prepared.plugins {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(n.Path(filepath.Join(binDir, filepath.Base(p))), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.calicoNodeStart(n)
}

// calicoNodeStart is one start of calico-node's install-cni on n: calico
// and calico-ipam copied from Calico's binary, 10-calico.conflist rendered
// from the manifest's template and written in place.
func (c *cluster) calicoNodeStart(n *kubenode.Node) {
	t := c.t
	t.Helper()
	tmpl, err := testbed.CalicoNetworkTemplate()
	if err != nil {
		t.Fatal(err)
	}
	values := testbed.CalicoDefaults(n.EtcdEndpoint())
	values["KUBERNETES_NODE_NAME"] = c.calicoName(n)
	conf, err := testbed.RenderCalicoNetwork(tmpl, values)
	if err != nil {
		t.Fatal(err)
	}
	if c.kdd {
		if conf, err = onKubernetesDatastore(conf); err != nil {
			t.Fatal(err)
		}
	}
	inst := testbed.CalicoInstaller{Binary: prepared.calico, BinDir: n.Path(binDir), ConfDir: n.Path(confDir), Network: conf}
	if err := inst.Run(); err != nil {
		t.Fatal(err)
	}
}

// calicoName is n's name in Calico: its Kubernetes name unless
// calicoNames says otherwise.
func (c *cluster) calicoName(n *kubenode.Node) string {
	if name, ok := c.calicoNames[n.Name]; ok {
		return name
	}
	return n.Name
}

// installSafeIPAM applies deploy/safe-ipam.yaml and waits for its pod to be
// Ready, which its readiness probe (doctor) allows only once the node is
// protected. installArgs are added to the install container's command
// with a JSON patch, as an operator edits the DaemonSet (for Calico 2.x,
// --delegate-handles=pod, as the manifest says).
func (c *cluster) installSafeIPAM(ctx context.Context, installArgs ...string) {
	c.t.Helper()
	c.installSafeIPAMIn(ctx, install.ModeOwnConflist, installArgs...)
}

// installSafeIPAMIn is installSafeIPAM with deploy/safe-ipam.yaml
// rendered for mode, as docs/install.md's deploy/render line does.
func (c *cluster) installSafeIPAMIn(ctx context.Context, mode string, installArgs ...string) {
	c.t.Helper()
	start := time.Now()
	c.mode = mode
	if c.kdd {
		if err := c.node.API.Apply(claimsManifest); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.node.API.Apply(c.manifestFor(manifest)); err != nil {
		c.t.Fatal(err)
	}
	var ops []string
	for _, a := range installArgs {
		ops = append(ops, fmt.Sprintf(`{"op":"add","path":"/spec/template/spec/initContainers/0/command/-","value":%q}`, a))
	}
	ops = append(ops, c.gcOps(ctx)...)
	if len(ops) > 0 {
		patch := []byte("[" + strings.Join(ops, ",") + "]")
		if _, err := c.kube.AppsV1().DaemonSets("kube-system").Patch(ctx, "safe-ipam", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	c.waitRollout(ctx, "safe-ipam")
	c.t.Logf("safe-ipam's DaemonSet Ready %s after it was applied", time.Since(start).Round(100*time.Millisecond))
	for _, n := range c.nodes {
		if code, out := c.adminOn(ctx, n, "doctor"); code != 0 {
			c.t.Fatalf("the DaemonSet is Ready but doctor on %s exits %d:\n%s", n.Name, code, out)
		}
	}
}

// manifestFor is path, one of deploy/'s manifests, rendered for the
// cluster's mode: path itself in deploy/'s own mode.
func (c *cluster) manifestFor(path string) string {
	c.t.Helper()
	if c.mode == "" || c.mode == install.ModeOwnConflist {
		return path
	}
	b, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	out, err := render.ForMode(string(b), c.mode)
	if err != nil {
		c.t.Fatal(err)
	}
	rendered := filepath.Join(c.t.TempDir(), c.mode+"-"+filepath.Base(path))
	if err := os.WriteFile(rendered, []byte(out), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return rendered
}

// gcOps are the JSON patch operations that give the gc container gcEvery.
func (c *cluster) gcOps(ctx context.Context) []string {
	c.t.Helper()
	if c.gcEvery == 0 {
		return nil
	}
	ds, err := c.kube.AppsV1().DaemonSets("kube-system").Get(ctx, "safe-ipam", metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	want := map[string]string{"--every=": c.gcEvery.String(), "--dead-node-grace=": (2 * c.gcEvery).String()}
	var ops []string
	extra := 0
	if c.kdd {
		extra = 1
		ops = append(ops, fmt.Sprintf(`{"op":"add","path":"/spec/template/spec/containers/%d/command/-","value":%q}`,
			slices.IndexFunc(ds.Spec.Template.Spec.Containers, func(ctr corev1.Container) bool { return ctr.Name == "gc" }),
			"--quarantine-grace="+(2*c.gcEvery).String()))
	}
	for i, ctr := range ds.Spec.Template.Spec.Containers {
		for j, arg := range ctr.Command {
			for flag, value := range want {
				if ctr.Name == "gc" && strings.HasPrefix(arg, flag) {
					ops = append(ops, fmt.Sprintf(`{"op":"replace","path":"/spec/template/spec/containers/%d/command/%d","value":%q}`, i, j, flag+value))
				}
			}
		}
	}
	if len(ops) != len(want)+extra {
		c.t.Fatalf("the gc container has not both of %v: %v", want, ops)
	}
	return ops
}

// waitRollout waits until the DaemonSet's pods all run its latest
// template and are Ready.
func (c *cluster) waitRollout(ctx context.Context, name string) {
	c.t.Helper()
	var last string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		ds, err := c.kube.AppsV1().DaemonSets("kube-system").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		st := ds.Status
		last = fmt.Sprintf("generation %d observed %d, desired %d, updated %d, ready %d, available %d",
			ds.Generation, st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady, st.NumberAvailable)
		if st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled > 0 &&
			st.UpdatedNumberScheduled == st.DesiredNumberScheduled && st.NumberReady == st.DesiredNumberScheduled &&
			st.NumberAvailable == st.DesiredNumberScheduled {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("DaemonSet %s not rolled out: %s", name, last)
		}
	}
}

// admin runs safe-ipam-admin on the first node, as adminOn does.
func (c *cluster) admin(ctx context.Context, args ...string) (int, string) {
	c.t.Helper()
	return c.adminOn(ctx, c.node, args...)
}

// adminOn runs safe-ipam-admin inside node n with the node's dirs, as an
// operator runs it there, and returns its exit code and output.
func (c *cluster) adminOn(ctx context.Context, n *kubenode.Node, args ...string) (int, string) {
	c.t.Helper()
	args = append(args, "--cni-bin-dir="+binDir)
	switch args[0] {
	case "doctor":
		args = append(args, "--cni-conf-dir="+confDir)
	case "audit":
		args = append(args, "--conf="+conflist, "--cri-endpoint="+criEndpoint)
	}
	cmd := n.Holder.Command(ctx, append([]string{prepared.admin}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if cmd.ProcessState == nil {
		c.t.Fatalf("safe-ipam %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// allocations is Calico's data: each allocated address and its handle.
func (c *cluster) allocations(ctx context.Context) map[netip.Addr]string {
	c.t.Helper()
	out, err := c.readAllocations(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cluster) readAllocations(ctx context.Context) (map[netip.Addr]string, error) {
	snap, err := c.calico.Calico(ctx)
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]string{}
	for _, a := range snap.Allocations() {
		out[a.IP] = a.Handle
	}
	return out, nil
}

// records is safe-ipam's records, one line each.
func (c *cluster) records(ctx context.Context) []string {
	c.t.Helper()
	var out []string
	for _, r := range c.readRecords(ctx) {
		out = append(out, fmt.Sprintf("%s %s %v", r.Attachment, r.State, r.IPs))
	}
	return out
}

// readRecords reads safe-ipam's records where the plugin keeps them by
// default: in Calico's etcd when Calico's datastore is etcd, else in each
// node's file store.
func (c *cluster) readRecords(ctx context.Context) []*record.Record {
	c.t.Helper()
	if !c.kdd {
		recs, err := c.calico.Records(ctx, network, testbed.EtcdStore(c.node.EtcdEndpoint(), config.DefaultEtcdPrefix))
		if err != nil {
			c.t.Fatal(err)
		}
		return recs
	}
	var all []*record.Record
	for _, n := range c.livingNodes() {
		recs, err := c.calico.Records(ctx, network, testbed.FileStore(n.Path(config.DefaultStoreDir)))
		if err != nil {
			c.t.Fatal(err)
		}
		all = append(all, recs...)
	}
	return all
}

// runningPods are the pods of namespace that run with an address and are
// not being deleted: what must each hold its own allocated address.
func (c *cluster) runningPods(ctx context.Context, namespace string) ([]corev1.Pod, error) {
	list, err := c.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && !p.Spec.HostNetwork &&
			!c.dead[p.Spec.NodeName] {
			out = append(out, p)
		}
	}
	return out, nil
}

// violations are what is wrong now with the running pods of namespace,
// on every node, by the two authorities: each pod's status.podIPs in the
// API server, and Calico's blocks and handles in etcd. Wrong is an
// address Calico holds for nobody (free, so it can be handed out again),
// held by a handle with no handle document, or two pods with one address.
// Safe to call from any goroutine.
func (c *cluster) violations(ctx context.Context, namespace string) ([]string, error) {
	pods, err := c.runningPods(ctx, namespace)
	if err != nil {
		return nil, err
	}
	// Pods first: a pod listed as running had its address before this read.
	snap, err := c.calico.Calico(ctx)
	if err != nil {
		return nil, err
	}
	holder := map[string]string{}
	var out []string
	for _, p := range pods {
		for _, pip := range p.Status.PodIPs {
			ip := pip.IP
			if other, ok := holder[ip]; ok {
				out = append(out, fmt.Sprintf("%s and %s both run with %s", other, p.Name, ip))
			}
			holder[ip] = p.Name
			a, ok := snap.Lookup(netip.MustParseAddr(ip))
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s (uid %s) runs with %s, which is free in Calico's data", p.Name, p.UID, ip))
			case snap.HandleCount(a.Handle) == 0:
				out = append(out, fmt.Sprintf("%s (uid %s) runs with %s, whose handle %s has no handle document", p.Name, p.UID, ip, a.Handle))
			}
		}
	}
	return out, nil
}

// kill kills node n for good (kubenode.Node.Kill), and counts its pods
// out of the running ones.
func (c *cluster) kill(n *kubenode.Node) {
	c.mu.Lock()
	if c.dead == nil {
		c.dead = map[string]bool{}
	}
	c.dead[n.Name] = true
	c.mu.Unlock()
	n.Kill()
}

// sandboxFailures are the FailedCreatePodSandBox events of namespace: pod
// starts the CNI plugin refused.
func (c *cluster) sandboxFailures(ctx context.Context, namespace string) []string {
	c.t.Helper()
	list, err := c.kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreatePodSandBox"})
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, fmt.Sprintf("%s: %s", e.InvolvedObject.Name, e.Message))
	}
	slices.Sort(out)
	return out
}

// pod is a pod that only waits, on the pod network.
func pod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels}, Spec: podSpec(false)}
}

// podSpec runs the pause program; ignoreTerm makes it wait out its grace
// period, as many real containers do.
func podSpec(ignoreTerm bool) corev1.PodSpec {
	cmd := []string{"/pause"}
	if ignoreTerm {
		cmd = append(cmd, "--ignore-term")
	}
	grace := int64(2)
	return corev1.PodSpec{
		// No cluster DNS here, and no ServiceAccount admission.
		DNSPolicy:                     corev1.DNSDefault,
		AutomountServiceAccountToken:  new(bool),
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{Name: "main", Image: kubenode.PauseImage, Command: cmd,
			ImagePullPolicy: corev1.PullNever}},
	}
}

// waitReleased waits until Calico and safe-ipam hold nothing: every
// address released.
func (c *cluster) waitReleased(ctx context.Context) {
	c.t.Helper()
	var allocs map[netip.Addr]string
	var recs []string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		allocs, recs = c.allocations(ctx), c.records(ctx)
		claimed := 0
		if c.kdd {
			claimed = c.claimCount(ctx) // a claim left would fence its address for ever
		}
		if len(allocs) == 0 && len(recs) == 0 && claimed == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("addresses not released after every pod went: Calico %v, safe-ipam %v, %d AddressClaims", allocs, recs, claimed)
		}
	}
}

// releaseAll deletes every pod and waits until every address is released.
func (c *cluster) releaseAll(ctx context.Context) {
	c.t.Helper()
	c.deleteAllPods(ctx)
	c.waitReleased(ctx)
}

// deleteAllPods deletes every pod of the default namespace gracefully and
// waits until they are gone.
func (c *cluster) deleteAllPods(ctx context.Context) {
	c.t.Helper()
	if err := c.kube.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		c.t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
		list, err := c.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d pods left", len(list.Items))
		}
	}
}

func (c *cluster) dumpOnFailure() {
	t := c.t
	if !t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if snap, err := c.calico.Calico(ctx); err == nil {
		for _, a := range snap.Allocations() {
			t.Logf("calico: %s held by %s", a.IP, a.Handle)
		}
	}
	if list, err := c.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range list.Items {
			t.Logf("pod %s/%s uid %s: %s %s ready=%v", p.Namespace, p.Name, p.UID, p.Status.Phase, p.Status.PodIP, kubenode.PodReady(&p))
		}
	}
	if list, err := c.kube.CoreV1().Events("").List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range list.Items {
			if e.Type != corev1.EventTypeNormal {
				t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, strings.TrimSpace(e.Message))
			}
		}
	}
}

// testContext bounds one test.
func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// seedClusterInformation writes ClusterInformation "default" with
// datastoreReady, which calico-node writes and Calico's main plugin checks
// before it wires a pod: in etcd, or as the crd.projectcalico.org object.
func (c *cluster) seedClusterInformation(ctx context.Context) error {
	if c.kdd {
		dyn, err := dynamic.NewForConfig(c.node.API.Config())
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "ClusterInformation",
			"metadata": map[string]any{"name": "default"},
			"spec":     map[string]any{"clusterGUID": "5f0b1c2dcluster", "clusterType": "k8s,bgp,kdd", "datastoreReady": true}}}
		gvr := schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "clusterinformations"}
		_, err = dyn.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{})
		return err
	}
	const key = "/calico/resources/v3/projectcalico.org/clusterinformations/default"
	val := fmt.Sprintf(`{"kind":"ClusterInformation","apiVersion":"projectcalico.org/v3","metadata":{"name":"default","uid":"8d6c3d0e-cluster-suite","creationTimestamp":%q},"spec":{"clusterGUID":"5f0b1c2dcluster","clusterType":"k8s,bgp","datastoreReady":true}}`,
		time.Now().UTC().Format(time.RFC3339))
	_, err := c.calico.Etcd.Put(ctx, key, val)
	return err
}

// selfContained is the kubeconfig at path with the files it names inlined,
// as calico-node writes Calico's: the node's containers (doctor, gc) read
// it inside the node, where the test's files are not.
func selfContained(path string) ([]byte, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, err
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return nil, err
	}
	return clientcmd.Write(*cfg)
}

// onKubernetesDatastore is Calico's rendered network config as Calico's
// Kubernetes-datastore manifest has it: datastore_type kubernetes, with
// the kubeconfig the template names already, and no etcd settings.
func onKubernetesDatastore(conf []byte) ([]byte, error) {
	var list map[string]any
	if err := json.Unmarshal(conf, &list); err != nil {
		return nil, err
	}
	plugins, _ := list["plugins"].([]any)
	for _, p := range plugins {
		if m, ok := p.(map[string]any); ok && m["type"] == "calico" {
			for k := range m {
				if strings.HasPrefix(k, "etcd_") {
					delete(m, k)
				}
			}
			m["datastore_type"] = "kubernetes"
		}
	}
	return json.MarshalIndent(list, "", "  ")
}

// livingNodes are the nodes the test did not kill: a dead node's file
// store died with it.
func (c *cluster) livingNodes() []*kubenode.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*kubenode.Node
	for _, n := range c.nodes {
		if !c.dead[n.Name] {
			out = append(out, n)
		}
	}
	return out
}
