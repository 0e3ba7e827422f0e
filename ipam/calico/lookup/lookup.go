// Package lookup reads Calico's data as the CNI binary needs it, the way
// calico-ipam reaches it: Calico's etcd through etcdconn, or the
// Kubernetes API through kubeapi (never client-go, whose package init
// every CNI call would pay). Only rare paths of the verbs read Calico
// (a KubeVirt VM's pod, fencing a holder on another node, an adopted
// pod-name handle), so it connects on the first read and not before: an
// ordinary pod's verbs dial nothing.
package lookup

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
	"github.com/safe-ipam/safe-ipam/ipam/guard"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
)

// timeout bounds connecting, and each read: a verb must not spend its
// deadline waiting on Calico for what only narrows its choice.
const timeout = 5 * time.Second

// Calico is Calico's datastore as one invocation reads it, connected on
// the first read. Close it when the invocation ends.
type Calico struct {
	conf config.Calico
	etcd *clientv3.Client
	kube *kubeapi.Client
	warn func(transport, why string)
}

// New is Calico's datastore as the config's top-level keys name it; it
// connects to nothing yet. warn, when set, is told how a transport it
// connects over is exposed (plain text, a certificate not checked
// against the cluster's CA), as the record store's is.
func New(c config.Calico, warn func(transport, why string)) *Calico {
	if warn == nil {
		warn = func(string, string) {}
	}
	return &Calico{conf: c, warn: warn}
}

// Close closes the connection a read opened, if any.
func (c *Calico) Close() error {
	if c.etcd == nil {
		return nil
	}
	err := c.etcd.Close()
	c.etcd = nil
	return err
}

// NodeKnown says whether Calico's etcd holds the Node called node; see
// calico.NodeKnown. The CNI binary reads no Node from the Kubernetes
// datastore: that is an error, which a caller takes as doubt.
func (c *Calico) NodeKnown(ctx context.Context, node string) (bool, error) {
	cli, err := c.etcdClient(ctx)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return calico.NodeKnown(ctx, cli, node)
}

// Allocation reads what Calico records of ip, from either datastore; a
// zero Allocation when ip is not allocated.
func (c *Calico) Allocation(ctx context.Context, ip netip.Addr) (guard.Allocation, error) {
	var a calico.Attribute
	var ok bool
	if c.conf.Datastore() == config.DatastoreKubernetes {
		kube, err := c.kubeClient()
		if err != nil {
			return guard.Allocation{}, err
		}
		if a, ok, err = calico.KDDAllocationAttribute(ctx, kube.Get, kubeapi.ErrNotFound, ip); err != nil || !ok {
			return guard.Allocation{}, err
		}
		return allocation(a), nil
	}
	cli, err := c.etcdClient(ctx)
	if err != nil {
		return guard.Allocation{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if a, ok, err = calico.AllocationAttribute(ctx, cli, ip); err != nil || !ok {
		return guard.Allocation{}, err
	}
	return allocation(a), nil
}

func allocation(a calico.Attribute) guard.Allocation {
	return guard.Allocation{Handle: a.Handle(), Owner: a.Secondary, Alternate: a.Alternate()}
}

// HandleAllocations reads the handle from Calico's etcd, then the blocks
// it names, and lists the addresses those blocks keep under it with their
// attributes. A handle that does not exist is an error.
func (c *Calico) HandleAllocations(ctx context.Context, handle string) (map[netip.Addr]guard.Allocation, error) {
	cli, err := c.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var h calico.Handle
	rev, err := calico.ReadJSON(ctx, cli, calico.HandleKey(handle), &h)
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
		if _, err := calico.ReadJSON(ctx, cli, calico.BlockKey(p), &b); err != nil {
			return nil, fmt.Errorf("reading block %s: %v", p, err)
		}
		for _, ord := range b.OrdinalsOf(handle) {
			ip, err := b.IP(ord)
			if err != nil {
				return nil, fmt.Errorf("block %s keeps handle %s at ordinal %d: %v", p, handle, ord, err)
			}
			a, _ := b.Attribute(ord)
			held[ip] = allocation(a)
		}
	}
	return held, nil
}

// etcdClient connects to Calico's etcd as calico-ipam reaches it, once.
func (c *Calico) etcdClient(ctx context.Context) (*clientv3.Client, error) {
	if c.etcd != nil {
		return c.etcd, nil
	}
	if c.conf.Datastore() != config.DatastoreEtcd {
		return nil, errors.New("Calico's datastore is " + c.conf.Datastore() + ", which the CNI binary does not read")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cli, err := etcdconn.Connect(ctx, etcdconn.Config{Endpoints: c.conf.Endpoints(), DialTimeout: timeout, TLS: c.conf.EtcdTLS("")})
	if err != nil {
		return nil, fmt.Errorf("Calico's etcd: %w", err)
	}
	c.warn("Calico's etcd", etcdconn.Exposure(c.conf.Endpoints(), c.conf.EtcdTLS("")))
	c.etcd = cli
	return cli, nil
}

// kubeClient reads kubernetes.kubeconfig for the API server calico-ipam
// reaches, once; it holds no connection open.
func (c *Calico) kubeClient() (*kubeapi.Client, error) {
	if c.kube != nil {
		return c.kube, nil
	}
	kube, err := kubeapi.New(c.conf.Kubeconfig, timeout)
	if err != nil {
		return nil, err
	}
	c.warn("the Kubernetes API", kube.Exposure())
	c.kube = kube
	return kube, nil
}
