package releaser

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/calico/etcdread"
)

// resourcePrefix is where Calico's etcdv3 datastore keeps its resources.
const resourcePrefix = "/calico/resources/v3/projectcalico.org/"

// etcdStore is Calico's etcdv3 datastore. Like Calico's etcd backend,
// every update and delete compares the key's revision as read.
type etcdStore struct {
	*datastore.EtcdStore
	cli *clientv3.Client
}

func newEtcdStore(endpoints []string) (*etcdStore, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", endpoints, err)
	}
	return &etcdStore{EtcdStore: datastore.NewEtcd(cli), cli: cli}, nil
}

func (e *etcdStore) Close() error { return e.cli.Close() }

func (e *etcdStore) snapshot(ctx context.Context) (*calicosim.Snapshot, error) {
	return calicosim.State(ctx, e.cli)
}

// resourceDoc is the part of a Calico resource kube-controllers reads: a
// Node's orchRefs, an endpoint's or peer's node and addresses.
type resourceDoc struct {
	Spec struct {
		OrchRefs []struct {
			NodeName     string `json:"nodeName"`
			Orchestrator string `json:"orchestrator"`
		} `json:"orchRefs"`
		Node       string   `json:"node"`
		IPNetworks []string `json:"ipNetworks"`
	} `json:"spec"`
}

// k8sName is getK8sNodeName: the node name of the first orchRef of
// orchestrator "k8s".
func (d resourceDoc) k8sName() string {
	for _, r := range d.Spec.OrchRefs {
		if r.Orchestrator == "k8s" {
			return r.NodeName
		}
	}
	return ""
}

func (e *etcdStore) calicoNodes(ctx context.Context, _ map[string]bool) (map[string]calicoNode, error) {
	nodes := map[string]calicoNode{}
	err := e.eachResource(ctx, "nodes/", func(key string, d resourceDoc) error {
		name, err := calico.ParseNodeKey(key)
		if err != nil {
			return err
		}
		nodes[name] = calicoNode{k8sName: d.k8sName()}
		return nil
	})
	return nodes, err
}

// eachResource decodes every resource under resourcePrefix+plural.
func (e *etcdStore) eachResource(ctx context.Context, plural string, do func(key string, d resourceDoc) error) error {
	resp, err := e.cli.Get(ctx, resourcePrefix+plural, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("listing %s: %w", resourcePrefix+plural, err)
	}
	for _, kv := range resp.Kvs {
		var d resourceDoc
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return fmt.Errorf("decoding %s: %w", kv.Key, err)
		}
		if err := do(string(kv.Key), d); err != nil {
			return err
		}
	}
	return nil
}

// txn runs op on key if key is still at version; it returns the new
// version.
func (e *etcdStore) txn(ctx context.Context, key string, version datastore.Version, op clientv3.Op) (datastore.Version, error) {
	rev, err := strconv.ParseInt(string(version), 10, 64)
	if err != nil {
		return "", fmt.Errorf("%s: version %q is not an etcd revision", key, version)
	}
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(op).Commit()
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", key, err)
	}
	if !resp.Succeeded {
		return "", fmt.Errorf("writing %s: %w", key, errConflict)
	}
	return datastore.Version(strconv.FormatInt(resp.Header.Revision, 10)), nil
}

func (e *etcdStore) deleteBlock(ctx context.Context, b *datastore.Block) error {
	key := calico.BlockKey(b.Block.CIDR)
	_, err := e.txn(ctx, key, b.Version, clientv3.OpDelete(key))
	return err
}

func (e *etcdStore) affinities(ctx context.Context, node string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, fam := range []calico.Family{calico.IPv4, calico.IPv6} {
		resp, err := e.cli.Get(ctx, calico.HostAffinityPrefix(node, fam), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return nil, fmt.Errorf("listing %s's affinities: %w", node, err)
		}
		for _, kv := range resp.Kvs {
			_, cidr, err := calico.ParseAffinityKey(string(kv.Key))
			if err != nil {
				return nil, err
			}
			out = append(out, cidr)
		}
	}
	return out, nil
}

func (e *etcdStore) affinity(ctx context.Context, node string, cidr netip.Prefix) (*affinityRef, error) {
	a := &affinityRef{node: node, cidr: cidr}
	rev, err := etcdread.ReadJSON(ctx, e.cli, calico.AffinityKey(node, cidr), &a.affinity)
	if err != nil || rev == 0 {
		return nil, err
	}
	a.version = datastore.Version(strconv.FormatInt(rev, 10))
	return a, nil
}

func (e *etcdStore) putAffinity(ctx context.Context, a *affinityRef) error {
	data, err := json.Marshal(a.affinity)
	if err != nil {
		return err
	}
	key := calico.AffinityKey(a.node, a.cidr)
	a.version, err = e.txn(ctx, key, a.version, clientv3.OpPut(key, string(data)))
	return err
}

func (e *etcdStore) deleteAffinity(ctx context.Context, a *affinityRef) error {
	key := calico.AffinityKey(a.node, a.cidr)
	_, err := e.txn(ctx, key, a.version, clientv3.OpDelete(key))
	return err
}

// deleteNode is Calico's Nodes().Delete on etcd: it releases the
// addresses of the node's workload endpoints (by address alone), deletes
// those endpoints, releases the node's affinities (blocks in use keep
// their addresses and lose their affinity), deletes its BGP peers, its
// node.<name> Felix and BGP configurations and host endpoints, then the
// Node.
func (e *etcdStore) deleteNode(ctx context.Context, name string, log *slog.Logger) error {
	snap, err := e.snapshot(ctx)
	if err != nil {
		return err
	}
	var opts []releaseOpt
	var doomed []string
	err = e.eachResource(ctx, "workloadendpoints/", func(key string, d resourceDoc) error {
		if d.Spec.Node != name {
			return nil
		}
		doomed = append(doomed, key)
		for _, n := range d.Spec.IPNetworks {
			if o, ok := optFor(snap, n); ok {
				opts = append(opts, o)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := releaseIPs(ctx, e, log, opts); err != nil {
		return err
	}
	if err := e.deleteKeys(ctx, doomed); err != nil {
		return err
	}
	if err := releaseHostAffinities(ctx, e, name, false); err != nil {
		return err
	}
	doomed = []string{}
	for _, plural := range []string{"bgppeers/", "hostendpoints/"} {
		err := e.eachResource(ctx, plural, func(key string, d resourceDoc) error {
			if d.Spec.Node == name {
				doomed = append(doomed, key)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return e.deleteKeys(ctx, append(doomed, resourcePrefix+"felixconfigurations/node."+name,
		resourcePrefix+"bgpconfigurations/node."+name, calico.NodeKey(name)))
}

func (e *etcdStore) deleteKeys(ctx context.Context, keys []string) error {
	for _, key := range keys {
		if _, err := e.cli.Delete(ctx, key); err != nil {
			return fmt.Errorf("deleting %s: %w", key, err)
		}
	}
	return nil
}

// optFor is the release of an endpoint's address n ("10.0.0.1/32"), in
// the block that holds it; false when no block does.
func optFor(snap *calicosim.Snapshot, n string) (releaseOpt, bool) {
	pfx, err := netip.ParsePrefix(n)
	if err != nil {
		return releaseOpt{}, false
	}
	for _, bs := range snap.Blocks {
		if bs.Block.CIDR.Contains(pfx.Addr()) {
			return releaseOpt{ip: pfx.Addr(), block: bs.Block.CIDR}, true
		}
	}
	return releaseOpt{}, false
}
