// Package etcdread reads Calico's data from Calico's etcd: a key as JSON
// with its revision, whether a Node exists, and an address's allocation.
// Package calico holds the data's shapes and links no etcd client, so the
// CNI binary's lean build can use them.
package etcdread

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// ReadJSON reads key into v and returns the key's mod revision, which a
// later Txn compares; 0 means the key does not exist (v is then untouched).
func ReadJSON(ctx context.Context, cli *clientv3.Client, key string, v any) (int64, error) {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return 0, fmt.Errorf("decoding %s: %w", key, err)
	}
	return resp.Kvs[0].ModRevision, nil
}

// NodeKnown says whether Calico's etcd holds the Node resource called
// name. kube-controllers deletes it with the Kubernetes node and frees the
// node's addresses, so its absence, read from an etcd that answered, is
// the evidence that the node is gone.
func NodeKnown(ctx context.Context, cli *clientv3.Client, name string) (bool, error) {
	resp, err := cli.Get(ctx, calico.NodeKey(name), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("reading Calico's Node %s: %w", name, err)
	}
	return resp.Count > 0, nil
}

// AllocationAttribute reads what Calico's etcd records of ip: the
// allocation's attribute (its handle and owners), and whether ip is
// allocated at all. The block that contains ip is one of the few a block
// size allows, all read in one round trip.
func AllocationAttribute(ctx context.Context, cli *clientv3.Client, ip netip.Addr) (calico.Attribute, bool, error) {
	var gets []clientv3.Op
	for _, p := range calico.BlockCandidates(ip) {
		gets = append(gets, clientv3.OpGet(calico.BlockKey(p)))
	}
	resp, err := cli.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return calico.Attribute{}, false, fmt.Errorf("reading the block of %s: %w", ip, err)
	}
	for _, r := range resp.Responses {
		kvs := r.GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			continue
		}
		var b calico.Block
		if err := json.Unmarshal(kvs[0].Value, &b); err != nil {
			return calico.Attribute{}, false, fmt.Errorf("decoding %s: %w", kvs[0].Key, err)
		}
		return b.AttributeOf(ip)
	}
	return calico.Attribute{}, false, nil
}
