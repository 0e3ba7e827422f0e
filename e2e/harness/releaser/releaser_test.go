package releaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/e2e/harness/backends"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

var shared kubetest.Shared

func TestMain(m *testing.M) { shared.Main(m) }

const (
	grace = 6 * time.Second
	// nodeBound is how long a deleted node's addresses, affinity and
	// Calico Node may take to go.
	nodeBound = 20 * time.Second
	// leakBound is how long past the grace period a leak may stay.
	leakBound = 2*grace + 10*time.Second
	poll      = 100 * time.Millisecond
	// handleBound is how long a handle may outlive the release of its
	// last address (Calico writes the block, then the handle).
	handleBound = 5 * time.Second
)

// TestContract holds the simulator and, when CALICO_KUBE_CONTROLLERS is
// set, Calico's real kube-controllers to the same contract. The real case
// is a sub-test that runs only then, and says so otherwise.
// When both run, they must also leave the same data behind.
func TestContract(t *testing.T) {
	bin := os.Getenv(Env)
	if bin == "" {
		t.Logf("%s is unset: the contract runs on the simulator only", Env)
	}
	for _, kind := range []string{Etcd, Kubernetes} {
		var sim, real map[string]string
		t.Run("simulator-"+kind, func(t *testing.T) { sim = contract(t, "s"+kind[:1], kind, "") })
		if bin == "" {
			continue
		}
		t.Run("kube-controllers-"+kind, func(t *testing.T) { real = contract(t, "k"+kind[:1], kind, bin) })
		if sim == nil || real == nil {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(real)) {
			if sim[k] != real[k] {
				t.Errorf("%s: %s differs:\nsimulator:        %s\nkube-controllers: %s", kind, k, sim[k], real[k])
			}
		}
		for k := range sim {
			if _, ok := real[k]; !ok {
				t.Errorf("%s: the simulator left %s, kube-controllers did not: %s", kind, k, sim[k])
			}
		}
		t.Logf("%s: the simulator and kube-controllers left the same %d objects of Calico's data", kind, len(real))
	}
}

// cluster is one sub-test's nodes, pods and Calico data, kept apart from
// the other's by the name prefix.
type cluster struct {
	t         *testing.T
	srv       *kubetest.Server
	datastore string
	ds        datastore.Datastore
	cli       *clientv3.Client  // etcd
	dyn       dynamic.Interface // Kubernetes datastore
	ns        string
	p         string
}

func (c *cluster) node(n string) string { return c.p + "-" + n }

// allocate assigns an address to pod on calicoNode as calico-ipam does
// for a Calico 3.x pod.
func (c *cluster) allocate(calicoNode, pod string) calicosim.Assignment {
	c.t.Helper()
	pool := calico.NewIPPool("default-ipv4-ippool", netip.MustParsePrefix("10.244.0.0/16"), 26)
	a := &calicosim.Allocator{Client: c.cli, Kube: c.dyn, Node: calicoNode}
	attrs := map[string]string{"namespace": c.ns, "node": calicoNode, "pod": pod,
		"timestamp": time.Now().UTC().Format("2006-01-02 15:04:05.999999999 -0700 MST")}
	asg, err := a.Assign(context.Background(), []calico.IPPool{pool}, "k8s-pod-network."+c.p+pod, attrs)
	if err != nil {
		c.t.Fatal(err)
	}
	return asg
}

// held says whether asg is still allocated to its handle, with its handle
// document counting it.
func (c *cluster) held(asg calicosim.Assignment) bool {
	c.t.Helper()
	b := c.block(asg.Block)
	if b == nil {
		return false
	}
	h, ok, err := b.AttributeOf(asg.IP)
	if err != nil {
		c.t.Fatal(err)
	}
	return ok && h.Handle() == asg.Handle && c.handleExists(asg.Handle)
}

func (c *cluster) block(cidr netip.Prefix) *calico.Block {
	c.t.Helper()
	b, err := c.ds.Block(context.Background(), cidr)
	if err != nil {
		c.t.Fatal(err)
	}
	if b == nil {
		return nil
	}
	return b.Block
}

func (c *cluster) handleExists(id string) bool {
	c.t.Helper()
	h, err := c.ds.Handle(context.Background(), id)
	if err != nil {
		c.t.Fatal(err)
	}
	return h != nil
}

// calicoNodeExists: Calico's Node on etcd, the Kubernetes Node on KDD.
func (c *cluster) calicoNodeExists(node string) bool {
	c.t.Helper()
	if c.datastore == Etcd {
		return c.exists(calico.NodeKey(node))
	}
	_, err := c.srv.Client().CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatal(err)
	}
	return err == nil
}

func (c *cluster) affinityExists(node string, cidr netip.Prefix) bool {
	c.t.Helper()
	if c.datastore == Etcd {
		return c.exists(calico.AffinityKey(node, cidr))
	}
	_, err := c.dyn.Resource(affinitiesGVR).Get(context.Background(), calico.AffinityName(node, cidr), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatal(err)
	}
	return err == nil
}

func (c *cluster) exists(key string) bool {
	c.t.Helper()
	resp, err := c.cli.Get(context.Background(), key, clientv3.WithCountOnly())
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.Count > 0
}

func setup(t *testing.T, prefix, kind string) *cluster {
	c := &cluster{t: t, datastore: kind, ns: "releaser-" + prefix, p: prefix}
	ctx := context.Background()
	if kind == Etcd {
		c.srv = shared.Get(t)
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.srv.Etcd().Endpoint()}, DialTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		if _, err := cli.Delete(ctx, "/calico/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		if err := calicosim.SeedIPPool(ctx, cli, "default-ipv4-ippool", "10.244.0.0/16", 26); err != nil {
			t.Fatal(err)
		}
		c.cli, c.ds = cli, datastore.NewEtcd(cli)
	} else {
		c.srv = backends.KubeServer(t, &shared)
		c.ds = backends.Kube(t, c.srv).Store
		dyn, err := dynamic.NewForConfig(c.srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		c.dyn = dyn
		err = calicosim.SeedKubeIPPool(ctx, c.srv.Config(), "default-ipv4-ippool", "10.244.0.0/16", 26)
		if err != nil && !apierrors.IsAlreadyExists(errors.Unwrap(err)) {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"a", "b", "c"} {
		if err := c.srv.SetNodeReady(c.node(n), true); err != nil {
			t.Fatal(err)
		}
		if kind != Etcd {
			continue
		}
		if err := SeedNode(ctx, c.cli, c.node(n), c.node(n)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// contract: (1) a deleted Kubernetes Node's allocations, affinity and
// Calico Node go within nodeBound; (2) an allocation whose pod does not
// exist, or is on another node than the allocation names, is released
// once the grace period has passed and not before; (3) a running pod's
// allocation on its own node, and one whose pod has no address yet, are
// never released.
// It returns what is left of Calico's IPAM data and Nodes, made
// comparable (see state).
func contract(t *testing.T, prefix, kind, bin string) map[string]string {
	c := setup(t, prefix, kind)
	a, b, cn := c.node("a"), c.node("b"), c.node("c")
	live, pending := c.allocate(a, "live"), c.allocate(a, "pending")
	ghost, moved := c.allocate(a, "ghost"), c.allocate(a, "moved")
	doomed := c.allocate(cn, "web")
	c.runPod("live", a, live.IP)
	c.runPod("pending", a)
	c.runPod("moved", b, moved.IP) // 12257: the address's allocation names a, its pod runs on b
	c.runPod("web", cn, doomed.IP)
	keep := []calicosim.Assignment{live, pending}
	leaks := []calicosim.Assignment{ghost, moved}
	if kind == Etcd {
		// kube-controllers maps a Calico node to its Kubernetes node by
		// its orchRefs: this Calico node of another name is a's.
		m := c.node("m")
		if err := SeedNode(context.Background(), c.cli, m, a); err != nil {
			t.Fatal(err)
		}
		mapped := c.allocate(m, "mapped")
		c.runPod("mapped", a, mapped.IP)
		keep = append(keep, mapped)
	}
	seqs := map[netip.Prefix]uint64{}
	for _, asg := range keep {
		seqs[asg.Block] = c.block(asg.Block).SequenceNumber
	}

	began := time.Now()
	r := start(t, Options{Kubeconfig: c.srv.Kubeconfig, Datastore: kind, EtcdEndpoints: []string{c.srv.Etcd().Endpoint()},
		LeakGrace: grace, Dir: t.TempDir()}, bin)
	t.Logf("%s in sync after %s", r.Name(), time.Since(began).Round(time.Millisecond))

	// The node controller's pod GC deletes a deleted node's pods.
	deleted := time.Now()
	if err := c.srv.Client().CoreV1().Nodes().Delete(context.Background(), cn, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.srv.DeletePod(c.ns, "web"); err != nil {
		t.Fatal(err)
	}
	gone := c.nodeGone(cn, doomed)
	var goneAfter time.Duration
	for time.Since(began) < grace {
		for _, asg := range append(keep, leaks...) {
			// A read that ends within the grace period saw the data
			// within it.
			if !c.held(asg) && time.Since(began) < grace {
				t.Fatalf("%s released %s of %s within the grace period %s", r.Name(), asg.IP, asg.Handle, grace)
			}
		}
		if goneAfter == 0 && gone() {
			goneAfter = time.Since(deleted)
		}
		time.Sleep(poll)
	}
	for goneAfter == 0 && !gone() {
		if time.Since(deleted) > nodeBound {
			t.Fatalf("%s: %s after node %s was deleted, some of its data is still there", r.Name(), nodeBound, cn)
		}
		time.Sleep(poll)
	}
	if goneAfter == 0 {
		goneAfter = time.Since(deleted)
	}
	t.Logf("%s cleaned up deleted node %s within %s", r.Name(), cn, goneAfter.Round(time.Millisecond))
	c.waitReleased(r, leaks, began)
	for end := time.Now().Add(grace); time.Now().Before(end); time.Sleep(poll) {
		for _, asg := range keep {
			if !c.held(asg) {
				t.Fatalf("%s released %s of %s, whose pod holds it on its node", r.Name(), asg.IP, asg.Handle)
			}
		}
	}
	if !c.calicoNodeExists(a) || !c.affinityExists(a, live.Block) {
		t.Errorf("%s took Calico Node %s or its affinity", r.Name(), a)
	}
	if err := r.Stop(); err != nil { // and once more at cleanup
		t.Errorf("stopping %s: %v", r.Name(), err)
	}
	return c.state(seqs)
}

// state is Calico's IPAM data and Nodes by key (etcd) or by kind and
// name (Kubernetes datastore), with the sub-test's prefix, times and uids
// taken out and the block sequence numbers made relative to seqs, each
// block's number before the releaser started.
func (c *cluster) state(seqs map[netip.Prefix]uint64) map[string]string {
	c.t.Helper()
	if c.datastore != Etcd {
		return c.kubeState(seqs)
	}
	out := map[string]string{}
	for _, prefix := range []string{calico.IPAMPrefix, calico.NodePrefix} {
		resp, err := c.cli.Get(context.Background(), prefix, clientv3.WithPrefix())
		if err != nil {
			c.t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			key, value := string(kv.Key), string(kv.Value)
			if strings.HasPrefix(key, calico.BlockPrefix) {
				value = c.relative(value, seqs)
			} else if strings.HasPrefix(key, calico.NodePrefix) {
				value = "(a Node)"
			}
			out[c.neutral(key)] = c.neutral(value)
		}
	}
	return out
}

// kubeState is state on the Kubernetes datastore, from the objects'
// specs as calicosim reads them.
func (c *cluster) kubeState(seqs map[netip.Prefix]uint64) map[string]string {
	c.t.Helper()
	snap, err := calicosim.KubeState(context.Background(), c.srv.Config())
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]string{}
	add := func(key string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			c.t.Fatal(err)
		}
		out[c.neutral(key)] = c.neutral(string(data))
	}
	for _, bs := range snap.Blocks {
		add("IPAMBlock "+bs.Block.CIDR.String(), json.RawMessage(c.relative(mustJSON(c.t, bs.Block), seqs)))
	}
	for id, h := range snap.Handles {
		add("IPAMHandle "+id, h)
	}
	for _, a := range snap.Affinities {
		add("BlockAffinity "+a.Node+" "+a.Block.String(), a.Affinity)
	}
	for _, n := range []string{"a", "b", "c"} {
		if c.calicoNodeExists(c.node(n)) {
			out[c.neutral("Node "+c.node(n))] = "(a Node)"
		}
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func (c *cluster) neutral(s string) string {
	return strings.NewReplacer(c.p+"-", "X-", "k8s-pod-network."+c.p, "k8s-pod-network.X", "releaser-"+c.p, "releaser-X").Replace(s)
}

// relative rewrites a block without its times, its sequence numbers
// relative to its number in seqs.
func (c *cluster) relative(doc string, seqs map[netip.Prefix]uint64) string {
	c.t.Helper()
	var b calico.Block
	if err := json.Unmarshal([]byte(doc), &b); err != nil {
		c.t.Fatal(err)
	}
	seq := seqs[b.CIDR]
	b.AffinityClaimTime = nil
	b.SequenceNumber -= seq
	for k, v := range b.SequenceNumberForAllocation {
		b.SequenceNumberForAllocation[k] = v - seq
	}
	for i := range b.Attributes {
		delete(b.Attributes[i].Secondary, "timestamp")
	}
	data, err := json.Marshal(b)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(data)
}

func (c *cluster) runPod(name, node string, ips ...netip.Addr) {
	c.t.Helper()
	var s []string
	for _, ip := range ips {
		s = append(s, ip.String())
	}
	if _, err := c.srv.RunPod(c.ns, name, node, s...); err != nil {
		c.t.Fatal(err)
	}
}

// nodeGone says whether node's allocation, block, affinity and Calico
// Node are all gone.
func (c *cluster) nodeGone(node string, asg calicosim.Assignment) func() bool {
	return func() bool {
		return !c.calicoNodeExists(node) && !c.affinityExists(node, asg.Block) && c.block(asg.Block) == nil && !c.handleExists(asg.Handle)
	}
}

// waitReleased waits for the leaks to be released as Calico releases them:
// the ordinal free at the tail of the free list, its sequence number and
// attribute gone, the handle document deleted.
func (c *cluster) waitReleased(r Releaser, leaks []calicosim.Assignment, since time.Time) {
	c.t.Helper()
	for _, asg := range leaks {
		for c.held(asg) {
			if time.Since(since) > grace+leakBound {
				c.t.Fatalf("%s has not released %s of %s after %s", r.Name(), asg.IP, asg.Handle, time.Since(since))
			}
			time.Sleep(poll)
		}
		c.t.Logf("%s released %s of %s after %s", r.Name(), asg.IP, asg.Handle, time.Since(since).Round(time.Millisecond))
		b := c.block(asg.Block)
		ord, err := b.Ordinal(asg.IP)
		if err != nil {
			c.t.Fatal(err)
		}
		if b.Allocations[ord] != nil || !containsTail(b.Unallocated, ord, len(leaks)) {
			c.t.Errorf("%s: ordinal %d of %s is not free at the tail of %v", r.Name(), ord, asg.Block, b.Unallocated)
		}
		if _, ok := b.SequenceNumberForAllocation[strconv.Itoa(ord)]; ok {
			c.t.Errorf("%s: %s keeps a sequence number for released ordinal %d", r.Name(), asg.Block, ord)
		}
		// The handle goes in a write of its own, after the block's.
		for end := time.Now().Add(handleBound); c.handleExists(asg.Handle); time.Sleep(poll) {
			if time.Now().After(end) {
				c.t.Errorf("%s: handle %s outlives its only address by %s", r.Name(), asg.Handle, handleBound)
				break
			}
		}
		if b.Affinity == nil || *b.Affinity != fmt.Sprintf("host:%s", c.node("a")) {
			c.t.Errorf("%s: block %s lost its affinity: %v", r.Name(), asg.Block, b.Affinity)
		}
	}
}

func containsTail(list []int, v, n int) bool {
	for _, x := range list[max(0, len(list)-n):] {
		if x == v {
			return true
		}
	}
	return false
}
