package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// settleDeadHolder releases holder, the record of another node that holds
// an address the delegate just gave this ADD, when that node is gone:
// Calico's etcd answered and has no Node of that name. kube-controllers
// frees a deleted node's addresses, and no DEL or GC of that node will
// ever come, so its record would fence the address for ever. Fencing
// blocks an ADD only on live evidence: any doubt (another datastore, an
// etcd that does not answer, a file store, which holds this node's
// records only) keeps the fence. It says whether the holder was released.
func (g *Guard) settleDeadHolder(ctx context.Context, holder *record.Record, cniPath string) bool {
	cluster, ok := g.store.(store.Cluster)
	if !ok || holder.Node == "" || holder.Node == g.node {
		return false
	}
	gone, err := g.nodeGone(ctx, holder.Node)
	if err != nil || !gone {
		if err != nil {
			g.log.Warn("cannot tell whether the holder's node is gone; fencing", "holder", holder.Attachment.String(), "node", holder.Node, "error", err)
		}
		return false
	}
	never := func(string, string) bool { return false }
	other := g.ForNode(holder.Node, cluster.ForNode(holder.Node))
	if err := other.Collect(ctx, holder, cniPath, other.GCRules(never, false)); err != nil {
		g.log.Warn("the holder's node is gone, but releasing its record failed; fencing", "holder", holder.Attachment.String(), "node", holder.Node, "error", err)
		return false
	}
	g.log.Warn("released the record of a node Calico no longer knows, which held an address Calico handed out again",
		"holder", holder.Attachment.String(), "node", holder.Node, "ips", holder.IPs)
	return true
}

// nodeGone asks Calico's etcd whether it has the Node called node.
func (g *Guard) nodeGone(ctx context.Context, node string) (bool, error) {
	cli, err := g.calicoEtcd(ctx)
	if err != nil {
		return false, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	known, err := calico.NodeKnown(ctx, cli, node)
	return !known, err
}

// calicoEtcd connects to Calico's etcd as calico-ipam reaches it. Only
// rare paths read Calico's data (fencing, an adopted pod-name handle), so
// nothing is kept open.
func (g *Guard) calicoEtcd(ctx context.Context) (*clientv3.Client, error) {
	c := g.cfg.Calico
	if c.Datastore() != config.DatastoreEtcd {
		return nil, errors.New("Calico's datastore is " + c.Datastore() + ", which the CNI binary does not read")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := etcdconn.Connect(ctx, etcdconn.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, TLS: c.EtcdTLS("")})
	if err != nil {
		return nil, fmt.Errorf("Calico's etcd: %w", err)
	}
	return cli, nil
}
