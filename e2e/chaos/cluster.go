package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/cni/backends"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Network is the network every history attaches to, Calico's usual name.
const Network = "k8s-pod-network"

// Namespace holds the StatefulSet whose pods the histories recreate.
const Namespace = "default"

// IfName is the interface of every attachment: Calico gives a pod one.
const IfName = "eth0"

// Generation is the handle naming of the Calico release calico-ipam
// imitates.
type Generation string

// The two generations. Legacy (Calico 2.x) keys ADD and DEL by
// namespace.podname, which is what makes a late DEL dangerous; modern
// (Calico 3.x) keys ADD by container and still releases the pod name on
// DEL.
const (
	Legacy Generation = "legacy"
	Modern Generation = "modern"
)

// StoreKind says where safe-ipam keeps its records. NoSafeIPAM runs
// calico-ipam alone: the control, which must show the failure.
type StoreKind string

// Store kinds.
const (
	FileStore  StoreKind = "file"
	EtcdStore  StoreKind = "etcd"
	NoSafeIPAM StoreKind = "none"
)

// Pool is a Calico IP pool the histories allocate from.
type Pool struct {
	Name      string
	CIDR      string
	BlockSize int
}

// The pools every cluster holds; a history names one in its config.
var (
	// WidePool never runs out in a history.
	WidePool = Pool{Name: "chaos-wide", CIDR: "10.96.0.0/24", BlockSize: 28}
	// TightPool has four blocks of four, so nodes claim blocks often and
	// can run out: ADD then fails and safe-ipam's failure path runs.
	TightPool = Pool{Name: "chaos-tight", CIDR: "10.97.0.0/28", BlockSize: 30}
	// SinglePool is one block of four, for scripts that fill it.
	SinglePool = Pool{Name: "chaos-single", CIDR: "10.98.0.0/30", BlockSize: 30}
)

var pools = []Pool{WidePool, TightPool, SinglePool}

// Nodes are the nodes of every cluster; a history uses the first one, two
// or three (the election histories need a dead node and two candidates).
var Nodes = []string{"node1", "node2", "node3"}

// Timeouts of one invocation. Ops that run while etcd is known to be down
// get the short one, so an outage costs little wall time; every other op
// gets the long one, so a loaded machine never makes it fail.
const (
	normalTimeout = 5 * time.Second
	outageTimeout = 300 * time.Millisecond
	// partitionTimeout bounds a held call's store requests, which get no
	// answer during a partition; calico-ipam's etcd still answers.
	partitionTimeout = time.Second
)

// Setup chooses the parts of one history.
type Setup struct {
	Generation Generation
	Store      StoreKind
	Nodes      int // 1 to 3
	Pool       Pool
	// HostLock gives calico-ipam a per-node lock file; without it only
	// etcd's compare-and-swap keeps concurrent allocations apart.
	HostLock bool
	// SharedPrefix keeps every node's etcd records under one prefix, as
	// the default config does. Histories give each node its own prefix:
	// see CrossNodeGCScript.
	SharedPrefix bool
	// StoreBehindProxy reaches the etcd store through the cluster's
	// Proxy, and calico-ipam through a wrapper that can hold an ADD, so
	// that a Partition step can cut the store's answers at the right
	// moment.
	StoreBehindProxy bool
	// Hosts runs each node's processes in a UTS namespace with a host
	// name of its own, as on machines of their own (HostRename changes
	// it); otherwise every node has this machine's.
	Hosts bool
	// SharedName gives node2 node1's Calico name: a stale nodename, as a
	// re-imaged machine that kept /var/lib/calico/nodename has.
	SharedName bool
}

func (s Setup) String() string {
	lock := "etcd-cas"
	if s.HostLock {
		lock = "host-lock"
	}
	out := fmt.Sprintf("%s/%s-store/%d-node/%s/%s", s.Generation, s.Store, s.Nodes, s.Pool.Name, lock)
	if s.Hosts {
		out += "/own-hosts"
	}
	if s.SharedName {
		out += "/stale-nodename"
	}
	return out
}

// Safe says whether safe-ipam fronts calico-ipam.
func (s Setup) Safe() bool { return s.Store != NoSafeIPAM }

// nodes lists the nodes in use.
func (s Setup) nodes() []string { return Nodes[:max(1, min(s.Nodes, len(Nodes)))] }

// Cluster is an etcd holding Calico's resources, plus per-history working
// directories for safe-ipam's file stores, caches, logs and locks. The
// histories of one run use it one after another; Reset clears what a
// history left.
type Cluster struct {
	bin   Binaries
	dir   string
	etcd  *etcdtest.Server
	cli   *clientv3.Client
	proxy *Proxy
	// held is a CNI_PATH whose calico-ipam can hold an ADD (see
	// holdingDelegate).
	held  Binaries
	setup Setup
	work  string
	// histories counts Resets, naming each history's working directory.
	histories int
	// uninstalled are the nodes where calico-ipam runs alone.
	uninstalled map[string]bool
	// read are the records an uninstall has read (UninstallRead) and not
	// forgotten yet, by node.
	read map[string][]*record.Record
	// lostNodes are Calico's Nodes NodesLost took away, by key.
	lostNodes map[string][]byte
	// names are the Calico names NodeRename gave, by node; former are the
	// names nodes had before.
	names  map[string]string
	former []string
	// hostRenames counts each node's HostRenames.
	hostRenames map[string]int
}

// NewCluster starts etcd under dir and seeds every pool and node.
func NewCluster(ctx context.Context, bin Binaries, dir string) (*Cluster, error) {
	srv, err := etcdtest.NewWith(filepath.Join(dir, "etcd"), etcdtest.Options{Fast: true})
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir, etcd: srv}
	if err := c.start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	var err error
	c.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{c.etcd.Endpoint()}, DialTimeout: normalTimeout})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	if c.proxy, err = NewProxy(strings.TrimPrefix(c.etcd.Endpoint(), "http://")); err != nil {
		return fmt.Errorf("etcd proxy: %w", err)
	}
	if c.held, err = holdingDelegate(c.bin, filepath.Join(c.dir, "held-bin")); err != nil {
		return err
	}
	return c.seed(ctx)
}

// holdingDelegate makes a CNI_PATH with safe-ipam and a calico-ipam that,
// on an ADD with CHAOS_HOLD_DIR set, says so and waits for the harness's
// go-ahead before running the simulator.
func holdingDelegate(bin Binaries, dir string) (Binaries, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	held := Binaries{Dir: dir}
	if err := os.Symlink(bin.Path(SafeIPAM), held.Path(SafeIPAM)); err != nil {
		return Binaries{}, err
	}
	script := "#!/bin/sh\n" +
		"if [ \"$CNI_COMMAND\" = ADD ] && [ -n \"$CHAOS_HOLD_DIR\" ]; then\n" +
		"  : > \"$CHAOS_HOLD_DIR/held\"\n" +
		"  while [ ! -e \"$CHAOS_HOLD_DIR/go\" ]; do sleep 0.01; done\n" +
		"fi\n" +
		"exec '" + bin.Path(CalicoIPAM) + "' \"$@\"\n"
	if err := os.WriteFile(held.Path(CalicoIPAM), []byte(script), 0o755); err != nil {
		return Binaries{}, err
	}
	return held, nil
}

func (c *Cluster) seed(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	for _, p := range pools {
		if err := calicosim.SeedIPPool(ctx, c.cli, p.Name, p.CIDR, p.BlockSize); err != nil {
			return fmt.Errorf("seeding pool %s: %w", p.Name, err)
		}
	}
	for _, n := range Nodes {
		if err := calicosim.SeedNode(ctx, c.cli, n); err != nil {
			return fmt.Errorf("seeding node %s: %w", n, err)
		}
	}
	return nil
}

// Close stops etcd, its client and the proxy.
func (c *Cluster) Close() {
	if c.proxy != nil {
		c.proxy.Close()
	}
	if c.cli != nil {
		c.cli.Close()
	}
	c.etcd.Close()
}

// binaries is the CNI_PATH of the current history.
func (c *Cluster) binaries() Binaries {
	if c.setup.StoreBehindProxy {
		return c.held
	}
	return c.bin
}

// Reset starts a history: it deletes every allocation, block, affinity,
// handle and record, and gives the history fresh directories.
func (c *Cluster) Reset(ctx context.Context, s Setup) error {
	if err := c.etcd.Resume(); err != nil { // a failed history may have left it paused
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	for _, prefix := range []string{calico.IPAMPrefix, etcdPrefixRoot} {
		if _, err := c.cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			return fmt.Errorf("clearing %s: %w", prefix, err)
		}
	}
	if c.work != "" {
		if err := os.RemoveAll(c.work); err != nil {
			return fmt.Errorf("clearing %s: %w", c.work, err)
		}
	}
	for _, n := range Nodes { // a history may have killed one
		if err := calicosim.SeedNode(ctx, c.cli, n); err != nil {
			return fmt.Errorf("seeding node %s: %w", n, err)
		}
	}
	c.histories++
	c.setup = s
	c.uninstalled = map[string]bool{}
	c.read = map[string][]*record.Record{}
	c.names, c.former, c.hostRenames = map[string]string{}, nil, map[string]int{}
	c.work = filepath.Join(c.dir, fmt.Sprintf("history-%d", c.histories))
	if err := os.MkdirAll(c.work, 0o700); err != nil {
		return fmt.Errorf("history directory: %w", err)
	}
	return nil
}

// Setup is the setup of the current history.
func (c *Cluster) Setup() Setup { return c.setup }

// Pause stops etcd, keeping its data: both safe-ipam's etcd store and
// calico-ipam's datastore become unreachable.
func (c *Cluster) Pause() { c.etcd.Pause() }

// Resume starts etcd again.
func (c *Cluster) Resume() error { return c.etcd.Resume() }

// LogFile is safe-ipam's log of the current history on node.
func (c *Cluster) LogFile(node string) string { return filepath.Join(c.work, node+".log") }

const etcdPrefixRoot = "/safe-ipam/chaos"

func (c *Cluster) etcdPrefix(node string) string {
	if c.setup.SharedPrefix {
		return etcdPrefixRoot + "/shared"
	}
	return etcdPrefixRoot + "/" + node
}

func (c *Cluster) storeDir(node string) string { return filepath.Join(c.work, node, "records") }

// netConf is the plugin config the runtime hands to node's CNI plugin:
// calico-ipam's keys at the top level and, with safe-ipam, its section.
// calicoNetConf is the config of a node where calico-ipam runs without
// safe-ipam.
func (c *Cluster) calicoNetConf(node string) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0", "name": Network, "type": "calico", "datastore_type": "etcdv3",
		"etcd_endpoints": c.etcd.Endpoint(), "nodename": c.calicoName(node),
		"ipam": map[string]any{"type": CalicoIPAM, "ipv4_pools": []string{c.setup.Pool.Name}},
	}
}

// releaseInCalico frees each address of att that Calico holds, directly
// in Calico's data, as `calicoctl ipam release --ip` does.
func (c *Cluster) releaseInCalico(ctx context.Context, att *Attachment) error {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	snap, err := calicosim.State(ctx, c.cli)
	if err != nil {
		return err
	}
	alloc := &calicosim.Allocator{Client: c.cli, Node: att.Node}
	for _, ip := range att.IPs {
		held, ok := snap.Lookup(ip)
		if !ok {
			continue
		}
		if err := alloc.Release(ctx, calicosim.Assignment{IP: ip, Block: held.Block, Handle: held.Handle}); err != nil {
			return fmt.Errorf("releasing %s in Calico's data: %w", ip, err)
		}
	}
	return nil
}

// kill is node's death as the cluster sees it: kube-controllers releases
// every address in the node's blocks, deletes the emptied blocks and the
// node's affinities, and deletes its Calico Node; a file store dies with
// the node's disk.
func (c *Cluster) kill(ctx context.Context, machine string) error {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	snap, err := calicosim.State(ctx, c.cli)
	if err != nil {
		return err
	}
	node := c.calicoName(machine)
	alloc := &calicosim.Allocator{Client: c.cli, Node: node}
	for _, aff := range snap.Affinities {
		if aff.Node != node {
			continue
		}
		for _, b := range snap.Blocks {
			if b.Block.CIDR != aff.Block {
				continue
			}
			for _, al := range b.Allocated {
				if err := alloc.Release(ctx, calicosim.Assignment{IP: al.IP, Block: al.Block, Handle: al.Handle}); err != nil {
					return fmt.Errorf("kube-controllers releasing %s of dead %s: %w", al.IP, node, err)
				}
			}
		}
		for _, key := range []string{calico.BlockKey(aff.Block), calico.AffinityKey(node, aff.Block)} {
			if _, err := c.cli.Delete(ctx, key); err != nil {
				return fmt.Errorf("kube-controllers deleting %s: %w", key, err)
			}
		}
	}
	if _, err := c.cli.Delete(ctx, calico.NodeKey(node)); err != nil {
		return fmt.Errorf("kube-controllers deleting Node %s: %w", node, err)
	}
	if c.setup.Store == FileStore {
		return os.RemoveAll(c.storeDir(machine))
	}
	return nil
}

// loseNodes takes every Calico Node out of etcd (lost), or puts back the
// ones it took (not lost): the listing a sweep reads empties while every
// node runs.
func (c *Cluster) loseNodes(ctx context.Context, lost bool) error {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	if !lost {
		for key, value := range c.lostNodes {
			if _, err := c.cli.Put(ctx, key, string(value)); err != nil {
				return err
			}
		}
		c.lostNodes = nil
		return nil
	}
	resp, err := c.cli.Get(ctx, calico.NodePrefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	c.lostNodes = map[string][]byte{}
	for _, kv := range resp.Kvs {
		c.lostNodes[string(kv.Key)] = kv.Value
	}
	_, err = c.cli.Delete(ctx, calico.NodePrefix, clientv3.WithPrefix())
	return err
}

// uninstall is `safe-ipam uninstall` on node once Calico's files are
// back, and sends the node's calls to calico-ipam alone from then on. The
// delegate runs in the harness's environment: Calico 3.x handles
// (histories uninstall only there) and calico-ipam's default host lock.
// After an UninstallRead the forget of the records read then runs here
// (guard.Forget, with uninstall's fate for their quarantines), so the
// calls in between race it; otherwise safe-ipam-admin runs, from the
// build under test.
func (c *Cluster) uninstall(ctx context.Context, call Call) (Outcome, error) {
	c.uninstalled[call.Node] = true
	if recs, read := c.read[call.Node]; read {
		delete(c.read, call.Node)
		return Outcome{}, c.forgetRead(ctx, call.Node, recs)
	}
	bin, conf := filepath.Join(c.work, call.Node, "uninstall", "bin"), filepath.Join(c.work, call.Node, "uninstall", "conf")
	for _, dir := range []string{bin, conf} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return Outcome{}, err
		}
	}
	if err := os.Symlink(c.binaries().Path(CalicoIPAM), filepath.Join(bin, CalicoIPAM)); err != nil && !errors.Is(err, fs.ErrExist) {
		return Outcome{}, err
	}
	if err := c.leaveToForget(call.Node, bin, conf); err != nil {
		return Outcome{}, err
	}
	return c.runAdmin(ctx, call, "uninstall", "--cni-bin-dir", bin, "--cni-conf-dir", conf)
}

// leaveToForget is what uninstall leaves in bin before it restores
// Calico's files (cninode.PendingForgetFile): the node's config, which no
// file names once they are restored. A run cut short left it already.
func (c *Cluster) leaveToForget(node, bin, conf string) error {
	path := filepath.Join(bin, cninode.PendingForgetFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	plugin, err := json.Marshal(c.netConf(node, normalTimeout))
	if err != nil {
		return err
	}
	data, err := json.Marshal(cninode.PendingForget{Networks: []cninode.PendingNetwork{{Path: filepath.Join(conf, "10-calico.conf"), Network: Network, Plugin: plugin}}})
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// forgetRead forgets recs, read by an UninstallRead of node.
func (c *Cluster) forgetRead(ctx context.Context, node string, recs []*record.Record) error {
	data, err := json.Marshal(c.netConf(node, normalTimeout))
	if err != nil {
		return err
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return err
	}
	o, err := backends.OpenRelease(ctx, cfg, c.binaries().Dir, "", slog.New(slog.DiscardHandler))
	if err != nil {
		return fmt.Errorf("uninstall on %s: %w", node, err)
	}
	defer o.Close()
	reclaimer := install.NewReclaimer(cfg, "")
	defer reclaimer.Close()
	for round := 1; ; round++ {
		err := c.forget(ctx, o, recs, reclaimer)
		if !errors.Is(err, store.ErrConflict) || round == 3 {
			return err
		}
		// A record changed since uninstall read it (an ADD quarantined
		// with it): uninstall stops and says to run it again, and the
		// operator does.
		if recs, err = o.Store.List(ctx, Network); err != nil {
			return fmt.Errorf("uninstall on %s: %w", node, err)
		}
	}
}

// forget is uninstall's forget of recs, read from node's store.
func (c *Cluster) forget(ctx context.Context, o *invocation.Opened, recs []*record.Record, reclaimer *install.Reclaimer) error {
	for _, rec := range recs {
		if err := o.Guard.Forget(ctx, rec, c.binaries().Dir, reclaimer.FateOf(rec)); err != nil {
			return fmt.Errorf("uninstall on %s: %w", rec.Node, err)
		}
	}
	return nil
}

// readForUninstall is uninstall reading node's records, once Calico's
// files are back; it forgets them at the next Uninstall of node, so the
// calls in between race it.
func (c *Cluster) readForUninstall(ctx context.Context, node string) error {
	stores, err := c.stores()
	if err != nil {
		return err
	}
	defer closeFileStores(c.setup, stores)
	recs, err := stores[node].List(ctx, Network)
	if err != nil {
		return fmt.Errorf("uninstall on %s reading its records: %w", node, err)
	}
	c.read[node] = recs
	return nil
}

// adopt records att, a running attachment with no record, as `safe-ipam
// adopt` does: committed, with its addresses under the one handle
// Calico's data keeps them under, indexed.
func (c *Cluster) adopt(ctx context.Context, att *Attachment) error {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	snap, err := calicosim.State(ctx, c.cli)
	if err != nil {
		return err
	}
	rec := &record.Record{Attachment: record.Attachment{Network: Network, ContainerID: att.ContainerID, IfName: att.IfName},
		PodNamespace: Namespace, PodName: att.Pod, PodUID: "uid-" + att.Pod, Node: c.calicoName(att.Node), State: record.Committed,
		Created: time.Now().UTC(), Updated: time.Now().UTC()}
	for _, ip := range att.IPs {
		held, ok := snap.Lookup(ip)
		if !ok || rec.Handle != "" && held.Handle != rec.Handle {
			return fmt.Errorf("adopting %s: Calico does not keep %s under one handle", att, ip)
		}
		rec.Handle = held.Handle
		rec.IPs = append(rec.IPs, netip.PrefixFrom(ip, held.Block.Bits()).String())
	}
	stores, err := c.stores()
	if err != nil {
		return err
	}
	defer closeFileStores(c.setup, stores)
	if _, err := stores[att.Node].Commit(ctx, nil, rec); err != nil {
		return fmt.Errorf("adopting %s: %w", att, err)
	}
	return nil
}

// reindex is install's indexing of node's records.
func (c *Cluster) reindex(ctx context.Context, node string) error {
	stores, err := c.stores()
	if err != nil {
		return err
	}
	defer closeFileStores(c.setup, stores)
	if _, _, err := store.Reindex(ctx, stores[node], Network); err != nil {
		return fmt.Errorf("indexing the records of %s: %w", node, err)
	}
	return nil
}

// upgrade removes every address index entry, as records an older
// safe-ipam wrote had none, then indexes every node's records as the new
// version's install does.
func (c *Cluster) upgrade(ctx context.Context) error {
	for _, n := range c.setup.nodes() {
		if c.setup.Store == EtcdStore {
			if _, err := c.cli.Delete(ctx, etcdstore.AddressPrefix(c.etcdPrefix(n), ""), clientv3.WithPrefix()); err != nil {
				return err
			}
			continue
		}
		links, err := filepath.Glob(filepath.Join(c.storeDir(n), Network, "@*"))
		if err != nil {
			return err
		}
		for _, l := range links {
			if err := os.Remove(l); err != nil {
				return err
			}
		}
	}
	for _, n := range c.setup.nodes() {
		if err := c.reindex(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// closeFileStores closes the file stores stores opened (the etcd ones
// share the cluster's client and stay open).
func closeFileStores(s Setup, stores map[string]store.Store) {
	if s.Store != FileStore {
		return
	}
	for _, st := range stores {
		st.Close()
	}
}

// deadNodesGC runs `safe-ipam gc --dead-nodes --apply` on the call's node
// with its CNI config, as the DaemonSet's gc container does.
func (c *Cluster) deadNodesGC(ctx context.Context, call Call) (Outcome, error) {
	conf, err := json.Marshal(c.netConf(call.Node, normalTimeout))
	if err != nil {
		return Outcome{}, err
	}
	path := filepath.Join(c.work, call.Node, "10-calico.conf")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return Outcome{}, err
	}
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		return Outcome{}, err
	}
	// Two sweeps, as the DaemonSet's loop makes: the first finds a dead
	// node gone, the second releases its records (no grace here: the
	// periods are the script's steps). A sighting is the first alone.
	sweeps := 2
	if call.Verb == DeadNodesSighting {
		sweeps = 1
	}
	var out Outcome
	for range sweeps {
		out, err = c.runAdmin(ctx, call, "gc", "--conf", path, "--cni-bin-dir", c.binaries().Dir, "--dead-nodes", "--dead-node-grace=0s", "--apply")
		if err != nil || !out.OK() {
			break
		}
	}
	return out, err
}

// runAdmin runs an admin command of safe-ipam (which hands it to
// safe-ipam-admin) for call: its exit code is the outcome's.
func (c *Cluster) runAdmin(ctx context.Context, call Call, args ...string) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, hangLimit)
	defer cancel()
	cmd := c.command(ctx, call.Node, c.binaries().Path(SafeIPAM), args...)
	env := c.env(call)
	cmd.Env = env[1:] // no CNI_COMMAND: an admin command, not a CNI call
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return Outcome{}, fmt.Errorf("%s hung for %s: %s", call, hangLimit, out.String())
	}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return Outcome{Code: uint(exitErr.ExitCode()), Msg: strings.TrimSpace(out.String()), Stderr: out.String()}, nil
	case err != nil:
		return Outcome{}, fmt.Errorf("running %s: %w", call, err)
	}
	return Outcome{Stderr: out.String()}, nil
}

func (c *Cluster) netConf(node string, timeout time.Duration) map[string]any {
	conf := map[string]any{
		"cniVersion":     "1.0.0", // calico-ipam refuses 1.1.0
		"name":           Network,
		"type":           "calico",
		"datastore_type": "etcdv3",
		"etcd_endpoints": c.etcd.Endpoint(),
		"nodename":       c.calicoName(node),
	}
	ipam := map[string]any{"type": CalicoIPAM, "ipv4_pools": []string{c.setup.Pool.Name}}
	if c.setup.Safe() {
		conf["cniVersion"] = "1.1.0" // safe-ipam speaks 1.0.0 to calico-ipam and adds GC
		handles := "container"
		if c.setup.Generation == Legacy {
			handles = "pod"
		}
		ipam["type"] = SafeIPAM
		ipam["delegate"] = map[string]any{"type": CalicoIPAM}
		ipam["delegateHandles"] = handles
		ipam["store"] = c.storeConf(node, timeout)
		ipam["cacheDir"] = filepath.Join(c.work, node, "cache")
		ipam["logFile"] = c.LogFile(node)
		ipam["gcGracePeriod"] = "0s"
	}
	conf["ipam"] = ipam
	return conf
}

func (c *Cluster) storeConf(node string, timeout time.Duration) map[string]any {
	if c.setup.Store == EtcdStore {
		endpoint := c.etcd.Endpoint()
		if c.setup.StoreBehindProxy {
			endpoint = c.proxy.Endpoint()
		}
		return map[string]any{"type": "etcd", "endpoints": []string{endpoint},
			"prefix": c.etcdPrefix(node), "dialTimeout": timeout.String()}
	}
	return map[string]any{"type": "file", "dir": c.storeDir(node)}
}

// stores opens every node's record store for reading.
func (c *Cluster) stores() (map[string]store.Store, error) {
	out := map[string]store.Store{}
	for _, n := range c.setup.nodes() {
		switch c.setup.Store {
		case FileStore:
			s, err := filestore.Open(c.storeDir(n))
			if err != nil {
				return nil, err
			}
			out[n] = s
		case EtcdStore:
			// The shared client stays open; Close of this store would
			// close it, so the store is never closed.
			out[n] = etcdstore.NewWithClient(c.cli, c.etcdPrefix(n), c.calicoName(n), normalTimeout)
		}
	}
	return out, nil
}

// Observation is what the checker reads after a step: Calico's data in
// etcd and safe-ipam's records on every node.
type Observation struct {
	Calico  *calicosim.Snapshot
	Records map[record.Attachment]*record.Record
}

// Observe reads Calico's IPAM data in one consistent read, then every
// record.
func (c *Cluster) Observe(ctx context.Context) (*Observation, error) {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	snap, err := calicosim.State(ctx, c.cli)
	if err != nil {
		return nil, err
	}
	obs := &Observation{Calico: snap, Records: map[record.Attachment]*record.Record{}}
	stores, err := c.stores()
	if err != nil {
		return nil, err
	}
	defer closeFileStores(c.setup, stores)
	if c.setup.Store == EtcdStore && c.setup.SharedPrefix {
		// Records are kept by Calico name: two nodes may share one (a
		// stale nodename), and a renamed node's stay under its former.
		stores = map[string]store.Store{}
		for _, name := range c.calicoNames() {
			stores[name] = etcdstore.NewWithClient(c.cli, c.etcdPrefix(name), name, normalTimeout)
		}
	}
	for n, s := range stores {
		// Each node's store lists its own records, also under a shared prefix.
		recs, err := s.List(ctx, Network)
		if err != nil {
			return nil, fmt.Errorf("records of %s: %w", n, err)
		}
		for _, r := range recs {
			if _, dup := obs.Records[r.Attachment]; dup {
				return nil, fmt.Errorf("record of %s kept by two nodes", r.Attachment)
			}
			obs.Records[r.Attachment] = r
		}
	}
	return obs, nil
}

// Dump is Calico's IPAM data and the records, for failure reports.
func (c *Cluster) Dump(ctx context.Context) string {
	obs, err := c.Observe(ctx)
	if err != nil {
		return fmt.Sprintf("(cannot read state: %v)", err)
	}
	out := map[string]any{"allocations": describeAllocations(obs), "handles": obs.Calico.Handles}
	recs := map[string]any{}
	for att, r := range obs.Records {
		recs[att.String()] = map[string]any{"state": r.State, "ips": r.IPs, "handle": r.Handle}
	}
	out["records"] = recs
	b, _ := json.MarshalIndent(out, "", "  ")
	return string(b)
}

func describeAllocations(obs *Observation) map[string]string {
	out := map[string]string{}
	for _, a := range obs.Calico.Allocations() {
		out[a.IP.String()] = a.Handle
	}
	return out
}
