package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

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
	// kube is the API server of the histories on Calico's Kubernetes
	// datastore, started at the first (kube.go).
	kube *kubeAPI
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
	if c.kube != nil {
		c.kube.close()
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
	if s.Kube() {
		if err := c.startKube(ctx); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	if c.kube != nil {
		if err := c.kube.reset(ctx); err != nil {
			return err
		}
	}
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

// Pause stops Calico's datastore, keeping its data: etcd, and with it
// safe-ipam's etcd store, or the API server, and with it the claims.
func (c *Cluster) Pause() {
	if c.setup.Kube() {
		_ = c.kube.pause() // a failure shows as calls that succeed
		return
	}
	c.etcd.Pause()
}

// Resume starts it again.
func (c *Cluster) Resume() error {
	if c.setup.Kube() {
		return c.kube.resume()
	}
	return c.etcd.Resume()
}

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
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": Network, "type": "calico", "datastore_type": "etcdv3",
		"etcd_endpoints": c.etcd.Endpoint(), "nodename": c.calicoName(node),
		"ipam": map[string]any{"type": CalicoIPAM, "ipv4_pools": []string{c.setup.Pool.Name}},
	}
	if c.setup.Kube() {
		c.kube.netConf(conf)
	}
	return conf
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
		if c.setup.Kube() && timeout == outageTimeout {
			// The claims' requests hang while the API server is stopped.
			ipam["verbTimeout"] = time.Second.String()
		}
	}
	if c.setup.Kube() {
		c.kube.netConf(conf)
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
		case FileStore, ClaimsStore:
			s, err := filestore.Open(c.storeDir(n))
			if err != nil {
				return nil, err
			}
			out[n] = s
			if c.setup.Kube() {
				// What the harness writes as an admin command would (adopt,
				// install's reindex) claims as it does; the client is the
				// cluster's (Close only drops its idle connections).
				out[n] = &claims.Store{Local: s, Claims: c.kube.claims, Node: c.calicoName(n), Host: record.ThisHost(),
					Warn: func(string, error) {}}
			}
		case EtcdStore:
			// The shared client stays open; Close of this store would
			// close it, so the store is never closed.
			out[n] = etcdstore.NewWithClient(c.cli, c.etcdPrefix(n), c.calicoName(n), normalTimeout)
		}
	}
	return out, nil
}
