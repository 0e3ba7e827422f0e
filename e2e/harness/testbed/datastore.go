package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

// Datastore is where a test cluster's calico-ipam keeps Calico's IPAM
// data: etcd (etcdv3) or the Kubernetes API (kubernetes). The scenarios
// run unchanged on either; only these steps differ.
type Datastore interface {
	// Type is Calico's datastore_type.
	Type() string
	// netConf adds the keys calico-ipam reads to find the datastore.
	netConf(conf map[string]any)
	// SeedPool writes an IPPool resource.
	SeedPool(ctx context.Context, name, cidr string, blockSize int) error
	// SeedNode writes the Node resource calico-ipam looks up.
	SeedNode(ctx context.Context, name string) error
	// SeedLegacyHandle allocates one IPv4 address for node under handle
	// as Calico 2.x did, the state an upgraded cluster carries.
	SeedLegacyHandle(ctx context.Context, node, handle string) (netip.Addr, error)
	// State reads Calico's IPAM data.
	State(ctx context.Context) (*calicosim.Snapshot, error)
	// Rekey moves a real calico-ipam's allocation of <network>.<containerID>
	// to the pod's Calico 2.x handle; see RekeyToPodHandle.
	Rekey(ctx context.Context, network, containerID string, pod Pod) error
}

// EtcdDatastore is Calico's etcdv3 datastore.
type EtcdDatastore struct {
	Client   *clientv3.Client
	Endpoint string
}

func (d EtcdDatastore) Type() string { return "etcdv3" }

func (d EtcdDatastore) netConf(conf map[string]any) {
	conf["datastore_type"] = d.Type()
	conf["etcd_endpoints"] = d.Endpoint
}

func (d EtcdDatastore) SeedPool(ctx context.Context, name, cidr string, blockSize int) error {
	return calicosim.SeedIPPool(ctx, d.Client, name, cidr, blockSize)
}

func (d EtcdDatastore) SeedNode(ctx context.Context, name string) error {
	return calicosim.SeedNode(ctx, d.Client, name)
}

func (d EtcdDatastore) SeedLegacyHandle(ctx context.Context, node, handle string) (netip.Addr, error) {
	return calicosim.SeedLegacyHandle(ctx, d.Client, node, handle)
}

func (d EtcdDatastore) State(ctx context.Context) (*calicosim.Snapshot, error) {
	return calicosim.State(ctx, d.Client)
}

func (d EtcdDatastore) Rekey(ctx context.Context, network, containerID string, pod Pod) error {
	return RekeyToPodHandle(ctx, datastore.NewEtcd(d.Client), network, containerID, pod)
}

// KubeDatastore is Calico's Kubernetes datastore (KDD): its IPAM
// resources are custom resources of a real kube-apiserver.
type KubeDatastore struct {
	Config *rest.Config
	// Kubeconfig is the file calico-ipam is given (kubernetes.kubeconfig).
	Kubeconfig string
}

func (d KubeDatastore) Type() string { return "kubernetes" }

func (d KubeDatastore) netConf(conf map[string]any) {
	conf["datastore_type"] = d.Type()
	conf["kubernetes"] = map[string]any{"kubeconfig": d.Kubeconfig}
}

func (d KubeDatastore) SeedPool(ctx context.Context, name, cidr string, blockSize int) error {
	return calicosim.SeedKubeIPPool(ctx, d.Config, name, cidr, blockSize)
}

func (d KubeDatastore) SeedNode(ctx context.Context, name string) error {
	return calicosim.SeedKubeNode(ctx, d.Config, name)
}

func (d KubeDatastore) SeedLegacyHandle(ctx context.Context, node, handle string) (netip.Addr, error) {
	return calicosim.SeedKubeLegacyHandle(ctx, d.Config, node, handle)
}

func (d KubeDatastore) State(ctx context.Context) (*calicosim.Snapshot, error) {
	return calicosim.KubeState(ctx, d.Config)
}

func (d KubeDatastore) Rekey(ctx context.Context, network, containerID string, pod Pod) error {
	ds, err := datastore.NewKubeForConfig(d.Config)
	if err != nil {
		return err
	}
	return RekeyToPodHandle(ctx, ds, network, containerID, pod)
}

// datastore is the cluster's Calico datastore: etcd unless set.
func (c *Cluster) datastore() Datastore {
	if c.Datastore != nil {
		return c.Datastore
	}
	return EtcdDatastore{Client: c.Etcd, Endpoint: c.EtcdEndpoint}
}

// stateTimeout bounds one read of Calico's data.
const stateTimeout = 10 * time.Second

// seedAll writes the pool and the nodes into ds.
func seedAll(ctx context.Context, ds Datastore, nodes []string) error {
	if err := ds.SeedPool(ctx, PoolName, PoolCIDR, BlockSize); err != nil {
		return fmt.Errorf("seeding IPPool: %w", err)
	}
	for _, n := range nodes {
		if err := ds.SeedNode(ctx, n); err != nil {
			return fmt.Errorf("seeding Node %s: %w", n, err)
		}
	}
	return nil
}
