package releaser

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Env names Calico's real kube-controllers binary; unset, Start runs the
// simulator.
const Env = "CALICO_KUBE_CONTROLLERS"

// Datastores, as Calico names them (DATASTORE_TYPE).
const (
	Etcd       = "etcdv3"
	Kubernetes = "kubernetes"
)

// Options say where Calico's data and the cluster are.
type Options struct {
	// Kubeconfig is the cluster's kube-apiserver (admin kubeconfig).
	Kubeconfig string
	// Datastore is Etcd or Kubernetes.
	Datastore string
	// EtcdEndpoints is Calico's etcd (Etcd only), plain http.
	EtcdEndpoints []string
	// LeakGrace is kube-controllers' leak grace period
	// (spec.controllers.node.leakGracePeriod), shortened for tests. Zero
	// turns the release of leaks off, as in Calico; a deleted node's
	// addresses are still released.
	LeakGrace time.Duration
	// Dir holds the releaser's log (and the real binary's status file).
	Dir string
}

// Releaser is Calico's kube-controllers as the suite sees it: on a deleted
// Kubernetes Node it frees the node's allocations, blocks' affinities and
// deletes Calico's Node; and it releases an allocation whose pod it
// believes gone (pod-GC / leak detection after LeakGrace).
type Releaser interface {
	// Name is "simulator" or "kube-controllers <path>".
	Name() string
	// Stop stops it; logs stay in Dir. A second Stop does nothing.
	Stop() error
}

// running is a Releaser with its log file.
type running interface {
	Releaser
	logPath() string
}

// Start runs $CALICO_KUBE_CONTROLLERS when set (the real binary), else the
// simulator; it registers Stop with t.Cleanup and names its log on failure.
func Start(t testing.TB, opt Options) Releaser {
	t.Helper()
	return start(t, opt, os.Getenv(Env))
}

// start runs the real binary at bin, or the simulator when bin is "".
func start(t testing.TB, opt Options, bin string) Releaser {
	t.Helper()
	if opt.Dir == "" {
		opt.Dir = t.TempDir()
	}
	r, err := launch(opt, bin)
	if err != nil {
		t.Fatalf("releaser: %v", err)
	}
	t.Logf("releaser: %s, leak grace %s, log %s", r.Name(), opt.LeakGrace, r.logPath())
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("releaser: stopping %s: %v", r.Name(), err)
		}
		if t.Failed() {
			t.Logf("releaser: %s's log is %s; it ends:\n%s", r.Name(), r.logPath(), tail(r.logPath()))
		}
	})
	return r
}

// tailLines is how much of a log a failure shows.
const tailLines = 60

// tail is the end of the log at path.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-tailLines):], "\n")
}

func launch(opt Options, bin string) (running, error) {
	if err := opt.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, err
	}
	if bin != "" {
		return startKubeControllers(opt, bin)
	}
	return startSimulator(opt)
}

func (o Options) check() error {
	switch {
	case o.Kubeconfig == "":
		return errors.New("no kubeconfig")
	case o.Datastore != Etcd && o.Datastore != Kubernetes:
		return fmt.Errorf("datastore %q is neither %s nor %s", o.Datastore, Etcd, Kubernetes)
	case o.Datastore == Etcd && len(o.EtcdEndpoints) == 0:
		return errors.New("etcdv3 datastore without etcd endpoints")
	case o.LeakGrace < 0:
		return fmt.Errorf("negative leak grace period %s", o.LeakGrace)
	}
	return nil
}
