// Package e2e proves safe-ipam's claim end to end, on real parts: cnitool
// runs ptp and loopback in network namespaces made with `ip netns`, and
// calico-ipam (the simulator, or the binary named by CALICO_IPAM) keeps
// its data in a real etcd, or, in the TestKube* scenarios, in Calico's
// Kubernetes datastore on a real kube-apiserver. Every scenario runs
// twice: with calico-ipam alone, the control, which must show the failure
// where there is one, and with safe-ipam in front. Invariants are read
// from Calico's data and from inside the netns, never from safe-ipam's
// own records.
//
// The tests need root and a working `ip netns`. Without them they skip,
// unless CI=true, where they fail.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/scaffold"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// netnsPrefix marks every netns this suite makes, so that a run can clear
// what a killed run left behind.
const netnsPrefix = "sipe2e-"

// suite is what TestMain prepares once per go test run.
type suite struct {
	bin testbed.Binaries
}

// prepared is set by TestMain before any test runs and only read after.
var prepared suite

// host is this suite's run: a root host with `ip netns`, its
// ip_forward kept and what a killed run left removed, and the testbed's
// programs built.
var host = scaffold.Suite{
	Name:  "e2e",
	Check: testbed.CheckHost,
	Prepare: func(ctx context.Context) (func(), error) {
		restoreForward, err := testbed.PreserveIPForward()
		if err != nil {
			return nil, err
		}
		undo := func() {
			if err := restoreForward(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			}
		}
		if err := testbed.NewNetnsSet(netnsPrefix).RemoveLeftovers(ctx); err != nil {
			undo()
			return nil, fmt.Errorf("removing leftover netns: %w", err)
		}
		return undo, nil
	},
	Build: func(ctx context.Context, dir string) (err error) {
		prepared.bin, err = testbed.Build(ctx, dir, os.Getenv("CALICO_IPAM"))
		return err
	},
}

func TestMain(m *testing.M) { host.Main(m) }

// newCluster starts an etcd of the test's own and returns an unseeded
// cluster whose netns are all removed when the test ends, failed or not.
func newCluster(t *testing.T, tag string) *testbed.Cluster {
	t.Helper()
	c, _ := newClusterServer(t, tag)
	return c
}

// newClusterServer is newCluster with its etcd server, for a test that
// stops it.
func newClusterServer(t *testing.T, tag string) (*testbed.Cluster, *etcdtest.Server) {
	t.Helper()
	host.Require(t)
	srv := etcdtest.Start(t)
	set := testbed.NewNetnsSet(netnsPrefix + tag + "-")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := set.RemoveAll(ctx); err != nil {
			t.Errorf("cleaning up netns: %v", err)
		}
	})
	return &testbed.Cluster{Bin: prepared.bin, Etcd: srv.Client(), EtcdEndpoint: srv.Endpoint(), Dir: t.TempDir(), Netns: set}, srv
}

// newKubeCluster is newCluster with Calico's data in the Kubernetes
// datastore: a kube-apiserver of the test's own (on an etcd that also
// holds safe-ipam's etcd store, when a test uses one), with Calico's IPAM
// CRDs applied. calico-ipam gets the admin kubeconfig.
func newKubeCluster(t *testing.T, tag string) *testbed.Cluster {
	t.Helper()
	c, _ := newKubeClusterServer(t, tag)
	return c
}

// newKubeClusterServer is newKubeCluster, and its API server.
func newKubeClusterServer(t *testing.T, tag string) (*testbed.Cluster, *kubetest.Server) {
	t.Helper()
	host.Require(t)
	crds := calicodata.Require(t, calicodata.CRDs)
	srv := kubetest.Start(t)
	if err := srv.Apply(crds); err != nil {
		t.Fatal(err)
	}
	// calico-ipam looks up the pod's namespace; the server creates
	// "default" itself a moment after it is ready.
	if err := srv.Namespace("default"); err != nil {
		t.Fatal(err)
	}
	set := testbed.NewNetnsSet(netnsPrefix + tag + "-")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := set.RemoveAll(ctx); err != nil {
			t.Errorf("cleaning up netns: %v", err)
		}
		assertNoCalicoInEtcd(ctx, t, srv.Etcd().Client())
	})
	return &testbed.Cluster{Bin: prepared.bin, Etcd: srv.Etcd().Client(), EtcdEndpoint: srv.Etcd().Endpoint(),
		Datastore: testbed.KubeDatastore{Config: srv.Config(), Kubeconfig: srv.Kubeconfig},
		Dir:       t.TempDir(), Netns: set}, srv
}

// assertNoCalicoInEtcd fails a Kubernetes-datastore test whose Calico
// data went to etcd: the scenario would then prove nothing about KDD.
func assertNoCalicoInEtcd(ctx context.Context, t *testing.T, cli *clientv3.Client) {
	resp, err := cli.Get(ctx, calico.IPAMPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Errorf("reading etcd: %v", err)
	} else if resp.Count > 0 {
		t.Errorf("Calico's datastore is Kubernetes, yet etcd holds %d keys under %s", resp.Count, calico.IPAMPrefix)
	}
}

// clusterOn is newCluster (etcd) or newKubeCluster (kube true).
func clusterOn(t *testing.T, kube bool, tag string) *testbed.Cluster {
	if kube {
		return newKubeCluster(t, "k"+tag)
	}
	return newCluster(t, tag)
}

// testContext bounds one test, so a hung plugin fails it rather than the
// whole run.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// dumpOnFailure logs Calico's data and safe-ipam's log when the test fails.
func dumpOnFailure(t *testing.T, c *testbed.Cluster) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if snap, err := c.Calico(context.Background()); err == nil {
			for _, a := range snap.Allocations() {
				t.Logf("calico: %s held by %s %v", a.IP, a.Handle, a.Secondary)
			}
		}
		for _, log := range c.Logs() {
			t.Logf("%s", log)
		}
	})
}
