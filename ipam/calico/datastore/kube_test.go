package datastore_test

import (
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/backends"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore/datastoretest"
)

// kube is one real kube-apiserver for the package, with Calico's CRDs.
var kube kubetest.Shared

func TestMain(m *testing.M) { kube.Main(m) }

// The Kubernetes datastore passes the same contract against a real
// kube-apiserver serving Calico's CRDs.
func TestKubeContract(t *testing.T) {
	srv := backends.KubeServer(t, &kube)
	datastoretest.Run(t, func(t *testing.T) *datastoretest.Backend { return backends.Kube(t, srv) })
}
