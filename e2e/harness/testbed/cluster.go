package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Calico resources every cluster is seeded with.
const (
	PoolName = "default-ipv4-ippool"
	PoolCIDR = "10.244.0.0/26"
	// BlockSize is small so that a handful of ADDs cycles a block: a /29
	// holds 8 addresses, and the pool holds 8 blocks.
	BlockSize = 29
	// BlockAddrs is the number of addresses in one block.
	BlockAddrs = 1 << (32 - BlockSize)
)

// Cluster is one isolated run: an etcd of its own, Calico's datastore
// (that etcd, or a kube-apiserver), a scratch directory, the binaries and
// every netns the run makes.
type Cluster struct {
	Bin Binaries
	// Etcd holds safe-ipam's etcd store and, without Datastore, Calico's data.
	Etcd         *clientv3.Client
	EtcdEndpoint string
	// Datastore is Calico's datastore; nil means Etcd.
	Datastore Datastore
	Dir       string
	Netns     *NetnsSet
}

// Seed writes the IPPool and the Node resources, as a real cluster has
// them; calico-ipam refuses to allocate without them.
func (c *Cluster) Seed(ctx context.Context, nodes ...string) error {
	return seedAll(ctx, c.datastore(), nodes)
}

// Node returns a node with its own config directory under the cluster's
// scratch directory.
func (c *Cluster) Node(name string, gen Generation) *Node {
	return &Node{
		Name:       name,
		Bin:        c.Bin,
		ConfDir:    filepath.Join(c.Dir, name, "net.d"),
		Generation: gen,
		Calico:     c.datastore(),
		// Every node of a test gets its own lock: nodes are separate hosts.
		Env: []string{"CALICO_IPAM_LOCK_FILE=" + filepath.Join(c.Dir, name, "ipam.lock")},
	}
}

// Network returns a network for node that uses the cluster's pool.
// Safe nil gives the control: calico-ipam alone.
func (c *Cluster) Network(name, cniVersion string, node *Node, safe *SafeConfig) Network {
	return Network{
		Name: name, CNIVersion: cniVersion, Node: node.Name, Datastore: c.datastore(), Pools: []string{PoolCIDR}, Safe: safe,
		CalicoLog: filepath.Join(c.Dir, node.Name, "calico-ipam.log"),
	}
}

// SafeConfig returns safe-ipam settings with state kept under the node's
// directory; store nil means a file store there too.
func (c *Cluster) SafeConfig(node *Node, handles string, st *Store) *SafeConfig {
	dir := filepath.Join(c.Dir, node.Name, "safe-ipam")
	s := FileStore(filepath.Join(dir, "records"))
	if st != nil {
		s = *st
	}
	return &SafeConfig{DelegateHandles: handles, Store: s, StateDir: dir}
}

// Calico reads Calico's IPAM data from its datastore.
func (c *Cluster) Calico(ctx context.Context) (*calicosim.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	return c.datastore().State(ctx)
}

// SeedLegacyHandle allocates one IPv4 address for node under a Calico
// 2.x handle, in the cluster's datastore.
func (c *Cluster) SeedLegacyHandle(ctx context.Context, node, handle string) (netip.Addr, error) {
	return c.datastore().SeedLegacyHandle(ctx, node, handle)
}

// Records lists safe-ipam's records of a network, to check it keeps
// nothing for attachments that are gone. The invariants themselves are
// checked from Calico's data, never from these.
func (c *Cluster) Records(ctx context.Context, network string, st Store) ([]*record.Record, error) {
	switch st.Type {
	case "file":
		if _, err := os.Stat(st.Dir); errors.Is(err, os.ErrNotExist) {
			return nil, nil // safe-ipam never wrote here
		}
		fs, err := filestore.Open(st.Dir)
		if err != nil {
			return nil, fmt.Errorf("opening file store %s: %w", st.Dir, err)
		}
		defer fs.Close()
		return fs.List(ctx, network)
	case "etcd":
		es := etcdstore.NewWithClient(c.Etcd, st.Prefix, "", 5*time.Second) // every node's records
		return es.List(ctx, network)
	}
	return nil, fmt.Errorf("unknown store type %q", st.Type)
}

// Logs returns the logs of safe-ipam and calico-ipam on every node, for
// failure messages.
func (c *Cluster) Logs() []string {
	var logs []string
	for _, pattern := range []string{"*/safe-ipam/safe-ipam.log", "*/calico-ipam.log"} {
		files, _ := filepath.Glob(filepath.Join(c.Dir, pattern))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			logs = append(logs, fmt.Sprintf("%s:\n%s", f, b))
		}
	}
	return logs
}

// Leftovers lists what the cluster still holds for a network once every
// sandbox is gone: Calico allocations and handle documents,
// inconsistencies in Calico's data, and safe-ipam's records when it runs.
func (c *Cluster) Leftovers(ctx context.Context, network string, safe *SafeConfig) ([]string, error) {
	snap, err := c.Calico(ctx)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, a := range snap.Allocations() {
		left = append(left, fmt.Sprintf("Calico allocation %s under handle %s", a.IP, a.Handle))
	}
	for h := range snap.Handles {
		left = append(left, "Calico handle document "+h)
	}
	left = append(left, snap.Inconsistencies()...)
	if safe != nil {
		recs, err := c.Records(ctx, network, safe.Store)
		if err != nil {
			return left, err
		}
		for _, rec := range recs {
			left = append(left, fmt.Sprintf("safe-ipam record %s (%s, %v)", rec.Attachment, rec.State, rec.IPs))
		}
	}
	slices.Sort(left)
	return left, nil
}
