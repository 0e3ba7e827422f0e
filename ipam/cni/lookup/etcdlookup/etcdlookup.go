// Package etcdlookup reads Calico's etcd datastore as the CNI binary
// needs it (see package lookup), the way calico-ipam reaches it: through
// etcdconn, on one connection made at the first read. It links the etcd
// client, so only the builds that read etcd have it.
package etcdlookup

import (
	"context"
	"fmt"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/etcdread"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/cni/lookup"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
)

// Etcd is Calico's etcd as one invocation reads it, connected on the
// first read. Close it when the invocation ends.
type Etcd struct {
	conf config.CalicoSettings
	cli  *clientv3.Client
	warn lookup.Warn
}

// New is Calico's etcd as the config's top-level keys name it; it
// connects to nothing yet. Its type fits invocation.Backends.
func New(c config.CalicoSettings, warn lookup.Warn) lookup.Reader {
	if warn == nil {
		warn = func(string, string) {}
	}
	return &Etcd{conf: c, warn: warn}
}

// Close closes the connection a read opened, if any.
func (c *Etcd) Close() error {
	if c.cli == nil {
		return nil
	}
	err := c.cli.Close()
	c.cli = nil
	return err
}

// NodeKnown says whether Calico's etcd holds the Node called node; see
// etcdread.NodeKnown.
func (c *Etcd) NodeKnown(ctx context.Context, node string) (bool, error) {
	cli, err := c.client(ctx)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, lookup.Timeout)
	defer cancel()
	return etcdread.NodeKnown(ctx, cli, node)
}

// Allocation reads what Calico records of ip; a zero Allocation when ip
// is not allocated.
func (c *Etcd) Allocation(ctx context.Context, ip netip.Addr) (guard.Allocation, error) {
	cli, err := c.client(ctx)
	if err != nil {
		return guard.Allocation{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, lookup.Timeout)
	defer cancel()
	a, ok, err := etcdread.AllocationAttribute(ctx, cli, ip)
	if err != nil || !ok {
		return guard.Allocation{}, err
	}
	return lookup.AllocationOf(a), nil
}

// HandleAllocations reads the handle, then the blocks it names, and lists
// the addresses those blocks keep under it with their attributes. A
// handle that does not exist is an error.
func (c *Etcd) HandleAllocations(ctx context.Context, handle string) (map[netip.Addr]guard.Allocation, error) {
	cli, err := c.client(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, lookup.Timeout)
	defer cancel()
	var h calico.Handle
	rev, err := etcdread.ReadJSON(ctx, cli, calico.HandleKey(handle), &h)
	if err != nil || rev == 0 {
		return nil, fmt.Errorf("reading handle %s: %v (revision %d)", handle, err, rev)
	}
	held := map[netip.Addr]guard.Allocation{}
	for cidr := range h.Block {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("handle %s names block %q", handle, cidr)
		}
		var b calico.Block
		if _, err := etcdread.ReadJSON(ctx, cli, calico.BlockKey(p), &b); err != nil {
			return nil, fmt.Errorf("reading block %s: %v", p, err)
		}
		for _, ord := range b.OrdinalsOf(handle) {
			ip, err := b.IP(ord)
			if err != nil {
				return nil, fmt.Errorf("block %s keeps handle %s at ordinal %d: %v", p, handle, ord, err)
			}
			a, _ := b.Attribute(ord)
			held[ip] = lookup.AllocationOf(a)
		}
	}
	return held, nil
}

// client connects to Calico's etcd as calico-ipam reaches it, once.
func (c *Etcd) client(ctx context.Context) (*clientv3.Client, error) {
	if c.cli != nil {
		return c.cli, nil
	}
	if c.conf.Datastore() != config.DatastoreEtcd {
		return nil, fmt.Errorf("Calico's datastore is %s, which the CNI binary does not read", c.conf.Datastore())
	}
	ctx, cancel := context.WithTimeout(ctx, lookup.Timeout)
	defer cancel()
	cli, err := etcdconn.Connect(ctx, etcdconn.Config{Endpoints: c.conf.Endpoints(), DialTimeout: lookup.Timeout, TLS: c.conf.EtcdTLS("")})
	if err != nil {
		return nil, fmt.Errorf("Calico's etcd: %w", err)
	}
	c.warn("Calico's etcd", etcdtls.Exposure(c.conf.Endpoints(), c.conf.EtcdTLS("")))
	c.cli = cli
	return cli, nil
}
