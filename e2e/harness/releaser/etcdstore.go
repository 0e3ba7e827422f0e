package releaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// resourcePrefix is where Calico's etcdv3 datastore keeps its resources.
const resourcePrefix = "/calico/resources/v3/projectcalico.org/"

// etcdStore is Calico's etcdv3 datastore. Like Calico's etcd backend,
// every update and delete compares the key's revision as read.
type etcdStore struct {
	cli *clientv3.Client
}

func newEtcdStore(endpoints []string) (*etcdStore, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", endpoints, err)
	}
	return &etcdStore{cli: cli}, nil
}

func (e *etcdStore) close() error { return e.cli.Close() }

func (e *etcdStore) snapshot(ctx context.Context) (*calicosim.Snapshot, error) {
	return calicosim.State(ctx, e.cli)
}

// nodeDoc is the part of a Calico Node (or any resource with spec.node)
// kube-controllers reads.
type nodeDoc struct {
	Spec struct {
		OrchRefs []struct {
			NodeName     string `json:"nodeName"`
			Orchestrator string `json:"orchestrator"`
		} `json:"orchRefs"`
		Node       string   `json:"node"`
		IPNetworks []string `json:"ipNetworks"`
	} `json:"spec"`
}

// k8sName is getK8sNodeName: the first orchRef of orchestrator "k8s".
func (d nodeDoc) k8sName() string {
	for _, r := range d.Spec.OrchRefs {
		if r.Orchestrator == "k8s" {
			return r.NodeName
		}
	}
	return ""
}

func (e *etcdStore) calicoNodes(ctx context.Context, _ map[string]bool) (map[string]calicoNode, error) {
	nodes := map[string]calicoNode{}
	err := e.eachResource(ctx, "nodes/", func(key string, d nodeDoc, _ int64) error {
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
func (e *etcdStore) eachResource(ctx context.Context, plural string, do func(key string, d nodeDoc, rev int64) error) error {
	resp, err := e.cli.Get(ctx, resourcePrefix+plural, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("listing Calico %s: %w", strings.TrimSuffix(plural, "/"), err)
	}
	for _, kv := range resp.Kvs {
		var d nodeDoc
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return fmt.Errorf("decoding %s: %w", kv.Key, err)
		}
		if err := do(string(kv.Key), d, kv.ModRevision); err != nil {
			return err
		}
	}
	return nil
}

// get reads key into v; rev 0 when absent.
func (e *etcdStore) get(ctx context.Context, key string, v any) (raw []byte, rev int64, err error) {
	resp, err := e.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, 0, err
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return nil, 0, fmt.Errorf("decoding %s: %w", key, err)
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// put writes value at key if key is still at rev; it returns the new
// revision.
func (e *etcdStore) put(ctx context.Context, key string, rev int64, value []byte) (int64, error) {
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(value))).Commit()
	if err != nil {
		return 0, fmt.Errorf("writing %s: %w", key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("writing %s: %w", key, errConflict)
	}
	return resp.Header.Revision, nil
}

// remove deletes key if it is still at rev.
func (e *etcdStore) remove(ctx context.Context, key string, rev int64) error {
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("deleting %s: %w", key, errConflict)
	}
	return nil
}

// block reads a block; nil when absent.
func (e *etcdStore) block(ctx context.Context, cidr netip.Prefix) (*calico.Block, []byte, int64, error) {
	var b calico.Block
	raw, rev, err := e.get(ctx, calico.BlockKey(cidr), &b)
	if err != nil || rev == 0 {
		return nil, nil, 0, err
	}
	return &b, raw, rev, nil
}

func (e *etcdStore) writeBlock(ctx context.Context, b *calico.Block, raw []byte, rev int64) error {
	data, err := calico.MarshalKeeping(raw, b)
	if err != nil {
		return err
	}
	_, err = e.put(ctx, calico.BlockKey(b.CIDR), rev, data)
	return err
}

func (e *etcdStore) releaseIPs(ctx context.Context, opts []releaseOpt) error {
	var errs []error
	for _, cidr := range blocksOf(opts) {
		errs = append(errs, e.releaseFromBlock(ctx, cidr, inBlock(opts, cidr)))
	}
	return errors.Join(errs...)
}

// releaseFromBlock is releaseIPsFromBlock.
func (e *etcdStore) releaseFromBlock(ctx context.Context, cidr netip.Prefix, opts []releaseOpt) error {
	for range datastoreRetries {
		b, raw, rev, err := e.block(ctx, cidr)
		if err != nil || b == nil {
			return err
		}
		counts, err := release(b, opts)
		if err != nil || len(counts) == 0 {
			return err
		}
		if empty(b) && b.Affinity == nil {
			err = e.remove(ctx, calico.BlockKey(cidr), rev)
		} else {
			err = e.writeBlock(ctx, b, raw, rev)
		}
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return err
		}
		for _, h := range sortedKeys(counts) {
			if err := e.decrementHandle(ctx, h, cidr, counts[h]); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("block %s: max retries hit", cidr)
}

func (e *etcdStore) decrementHandle(ctx context.Context, id string, cidr netip.Prefix, n int) error {
	key := calico.HandleKey(id)
	for range datastoreRetries {
		h := calico.NewHandle()
		_, rev, err := e.get(ctx, key, h)
		if err != nil {
			return err
		}
		if rev == 0 {
			return fmt.Errorf("handle %s does not exist", id)
		}
		if err := decrement(h, id, cidr.String(), n); err != nil {
			return err
		}
		if len(h.Block) == 0 {
			err = e.remove(ctx, key, rev)
		} else {
			var data []byte
			if data, err = json.Marshal(h); err == nil {
				_, err = e.put(ctx, key, rev, data)
			}
		}
		if !errors.Is(err, errConflict) {
			return err
		}
	}
	return fmt.Errorf("handle %s: max retries hit", id)
}

func (e *etcdStore) releaseHostAffinities(ctx context.Context, node string, mustBeEmpty bool) error {
	var stored error
	for _, fam := range []calico.Family{calico.IPv4, calico.IPv6} {
		resp, err := e.cli.Get(ctx, calico.HostAffinityPrefix(node, fam), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return fmt.Errorf("listing %s's affinities: %w", node, err)
		}
		for _, kv := range resp.Kvs {
			_, cidr, err := calico.ParseAffinityKey(string(kv.Key))
			if err != nil {
				return err
			}
			if err := retryConflicts(func() error { return e.releaseBlockAffinity(ctx, node, cidr, mustBeEmpty) }); err != nil {
				stored = err
			}
		}
	}
	return stored
}

func (e *etcdStore) releaseBlockAffinity(ctx context.Context, node string, cidr netip.Prefix, mustBeEmpty bool) error {
	affKey := calico.AffinityKey(node, cidr)
	var aff calico.Affinity
	_, affRev, err := e.get(ctx, affKey, &aff)
	if err != nil || affRev == 0 {
		return err
	}
	b, raw, rev, err := e.block(ctx, cidr)
	if err != nil || b == nil {
		return err
	}
	if !affineTo(b, node) {
		_ = e.remove(ctx, affKey, affRev) // a stale affinity
		return nil
	}
	if mustBeEmpty && !empty(b) {
		return errNotEmpty
	}
	aff.State = calico.AffinityPendingDeletion
	data, err := json.Marshal(aff)
	if err != nil {
		return err
	}
	if affRev, err = e.put(ctx, affKey, affRev, data); err != nil {
		return err
	}
	if empty(b) {
		err = e.remove(ctx, calico.BlockKey(cidr), rev)
	} else {
		dropAffinity(b)
		err = e.writeBlock(ctx, b, raw, rev)
	}
	if err != nil {
		return err
	}
	return e.remove(ctx, affKey, affRev)
}

// deleteNode is Calico's Nodes().Delete on etcd: it releases the
// addresses of the node's workload endpoints (by address alone), deletes
// those endpoints, releases the node's affinities (blocks in use keep
// their addresses and lose their affinity), deletes its BGP peers, its
// node.<name> Felix and BGP configurations and host endpoints, then the
// Node.
func (e *etcdStore) deleteNode(ctx context.Context, name string) error {
	snap, err := e.snapshot(ctx)
	if err != nil {
		return err
	}
	var opts []releaseOpt
	var weps []string
	err = e.eachResource(ctx, "workloadendpoints/", func(key string, d nodeDoc, _ int64) error {
		if d.Spec.Node != name {
			return nil
		}
		weps = append(weps, key)
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
	if err := e.releaseIPs(ctx, opts); err != nil && !errors.Is(err, errConflict) {
		return err
	}
	for _, key := range weps {
		if _, err := e.cli.Delete(ctx, key); err != nil {
			return fmt.Errorf("deleting %s: %w", key, err)
		}
	}
	if err := e.releaseHostAffinities(ctx, name, false); err != nil {
		return err
	}
	doomed := []string{resourcePrefix + "felixconfigurations/node." + name, resourcePrefix + "bgpconfigurations/node." + name}
	for _, plural := range []string{"bgppeers/", "hostendpoints/"} {
		err := e.eachResource(ctx, plural, func(key string, d nodeDoc, _ int64) error {
			if d.Spec.Node == name {
				doomed = append(doomed, key)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, key := range append(doomed, calico.NodeKey(name)) {
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

// retryConflicts runs op until it does not lose a race, at most
// datastoreRetries times.
func retryConflicts(op func() error) error {
	for range datastoreRetries {
		err := op()
		if !errors.Is(err, errConflict) {
			return err
		}
	}
	return errors.New("max retries hit")
}

// blocksOf lists the blocks of opts, in order.
func blocksOf(opts []releaseOpt) []netip.Prefix {
	var out []netip.Prefix
	for _, o := range opts {
		if !slices.Contains(out, o.block) {
			out = append(out, o.block)
		}
	}
	return out
}

func inBlock(opts []releaseOpt, cidr netip.Prefix) []releaseOpt {
	var out []releaseOpt
	for _, o := range opts {
		if o.block == cidr {
			out = append(out, o)
		}
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
