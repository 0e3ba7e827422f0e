package calicosim

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// SeedIPPool writes an IPPool resource as a default Calico install does
// (see calico.NewIPPool), with a fresh uid and creation time.
func SeedIPPool(ctx context.Context, cli *clientv3.Client, name, cidr string, blockSize int) error {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return fmt.Errorf("seeding pool %s: %w", name, err)
	}
	pool := calico.NewIPPool(name, prefix.Masked(), blockSize)
	pool.Metadata.UID, pool.Metadata.CreationTimestamp = newUID(), nowStamp()
	return seed(ctx, cli, calico.IPPoolKey(name), pool)
}

// SeedNode writes the Node resource calico-ipam requires for a node.
func SeedNode(ctx context.Context, cli *clientv3.Client, name string) error {
	node := calico.NewNode(name)
	node.Metadata.UID, node.Metadata.CreationTimestamp = newUID(), nowStamp()
	return seed(ctx, cli, calico.NodeKey(name), node)
}

// SeedLegacyHandle allocates one IPv4 address for node under handle (for
// example "default.web-0") as Calico 2.x did: from the node's blocks in
// any enabled pool, with no secondary attributes. It leaves the state an
// upgraded cluster carries over.
func SeedLegacyHandle(ctx context.Context, cli *clientv3.Client, node, handle string) (netip.Addr, error) {
	return seedLegacy(ctx, &Allocator{Client: cli, Node: node}, handle)
}

// seedLegacy allocates with a, on its datastore, as SeedLegacyHandle
// describes.
func seedLegacy(ctx context.Context, a *Allocator, handle string) (netip.Addr, error) {
	pools, err := a.store().ipPools(ctx)
	if err != nil {
		return netip.Addr{}, err
	}
	v4, err := SelectPools(pools, nil, calico.IPv4)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("seeding handle %s: %w", handle, err)
	}
	asg, err := a.Assign(ctx, v4, handle, nil)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("seeding handle %s: %w", handle, err)
	}
	return asg.IP, nil
}

func seed(ctx context.Context, cli *clientv3.Client, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", key, err)
	}
	if _, err := cli.Put(ctx, key, string(data)); err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	return nil
}

// newUID returns a random RFC 4122 version 4 UUID, the form of a
// Kubernetes uid.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func nowStamp() string { return time.Now().UTC().Format(time.RFC3339) }
