package datastore_test

import (
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/backends"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore/datastoretest"
)

// The etcd datastore passes the contract against a real etcd that
// requires client certificates, as Calico's etcd clusters do.
func TestEtcdContract(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	datastoretest.Run(t, func(t *testing.T) *datastoretest.Backend { return backends.Etcd(t, srv.Client()) })
}
