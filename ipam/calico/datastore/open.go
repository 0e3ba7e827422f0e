package datastore

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
)

// Settings say how to reach Calico's datastore: plain values, as the
// admin commands resolve them from flags and --conf.
type Settings struct {
	// Type is Etcd or Kubernetes.
	Type string
	// Endpoints and TLS reach Calico's etcd; each TLS file names the
	// setting (flag or --conf key) that gave it.
	Endpoints []string
	TLS       etcdtls.Files
	// Kubeconfig reaches the API server of the kubernetes datastore.
	Kubeconfig string
}

// open opens Calico's datastore. With etcd it also returns the client;
// the caller closes both.
func open(ctx context.Context, s Settings) (Datastore, *clientv3.Client, error) {
	if s.Type == Kubernetes {
		ds, err := NewKube(s.Kubeconfig, 0)
		return ds, nil, err
	}
	cli, err := etcdconn.Connect(ctx, etcdconn.Config{Endpoints: s.Endpoints, TLS: s.TLS, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	return NewEtcd(cli), cli, nil
}

// OpenCalico opens Calico's datastore, as calico-ipam reaches it from its
// network config (admin.CalicoSettings) or as the flags say
// (admin.Datastores.Settings): the one way every command opens it. Close with
// the returned func.
func OpenCalico(ctx context.Context, s Settings) (Datastore, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ds, cli, err := open(ctx, s)
	if err != nil {
		return nil, nil, fmt.Errorf("Calico's datastore: %w", err)
	}
	return ds, func() {
		ds.Close()
		if cli != nil {
			cli.Close()
		}
	}, nil
}

// EtcdClient is the client of the etcd ds reads, nil when ds is not in
// etcd: safe-ipam's records in Calico's etcd are read through it at the
// scan's revision.
func EtcdClient(ds Datastore) *clientv3.Client {
	if e, ok := ds.(*EtcdStore); ok {
		return e.Client
	}
	return nil
}
