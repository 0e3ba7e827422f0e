package calicosim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"sync"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
)

// kube is one real kube-apiserver for the package's KDD tests, with
// Calico's CRDs installed once (crdsOnce).
var (
	kube     kubetest.Shared
	crdsOnce sync.Once
	crdsErr  error
)

func TestMain(m *testing.M) { kube.Main(m) }

// kdd is the simulator on the Kubernetes datastore of a real apiserver.
type kdd struct {
	t          *testing.T
	cfg        *rest.Config
	dyn        dynamic.Interface
	kubeconfig string
	ctx        context.Context
}

// newKDD returns the package's apiserver with Calico's CRDs, emptied of
// IPAM objects and pools, with node1 and the given pools. Tests using it
// must not run in parallel.
func newKDD(t *testing.T, pools ...poolSpec) *kdd {
	t.Helper()
	srv := kube.Get(t)
	crdsPath := calicodata.Require(t, calicodata.CRDs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	crdsOnce.Do(func() { crdsErr = InstallKubeCRDs(ctx, srv.Config(), crdsPath) })
	if crdsErr != nil {
		t.Fatal(crdsErr)
	}
	dyn, err := newDynamic(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	k := &kdd{t: t, cfg: srv.Config(), dyn: dyn, kubeconfig: srv.Kubeconfig, ctx: ctx}
	k.reset(pools...)
	return k
}

func (k *kdd) reset(pools ...poolSpec) {
	k.t.Helper()
	for _, kd := range []kind{kindBlock, kindHandle, kindAffinity, kindPool} {
		if err := k.dyn.Resource(kd.gvr).DeleteCollection(k.ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			k.t.Fatalf("emptying %s: %v", kd.gvr.Resource, err)
		}
	}
	if err := SeedKubeNode(k.ctx, k.cfg, node1); err != nil {
		k.t.Fatal(err)
	}
	for _, p := range pools {
		if err := SeedKubeIPPool(k.ctx, k.cfg, p.name, p.cidr, p.blockSize); err != nil {
			k.t.Fatal(err)
		}
	}
	waitNamespace(k.t, k.ctx, k.dyn, "default")
}

// waitNamespace waits for a namespace the apiserver creates by itself
// shortly after it is ready.
func waitNamespace(t *testing.T, ctx context.Context, dyn dynamic.Interface, name string) {
	t.Helper()
	for {
		_, err := dyn.Resource(kindNamespace.gvr).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return
		}
		if pause(ctx, 50*time.Millisecond) != nil {
			t.Fatalf("namespace %s never appeared: %v", name, err)
		}
	}
}

// conf is a calico-ipam config for this apiserver, changed by edits as
// in sim.conf.
func (k *kdd) conf(edits map[string]any) []byte {
	k.t.Helper()
	c := map[string]any{
		"cniVersion": "1.0.0", "name": network, "type": "calico-ipam",
		"datastore_type": "kubernetes", "kubernetes": map[string]any{"kubeconfig": k.kubeconfig}, "nodename": node1,
	}
	for key, v := range edits {
		c[key] = v
	}
	c["ipam"] = map[string]any{"type": "calico-ipam"}
	data, err := json.Marshal(c)
	if err != nil {
		k.t.Fatal(err)
	}
	return data
}

func kddPlugin(mode HandleMode) *Plugin {
	env := map[string]string{EnvLockFile: NoLock, EnvHandles: string(mode), EnvTimeout: "20s"}
	return New(func(key string) string { return env[key] }, &bytes.Buffer{}, &bytes.Buffer{})
}

func (k *kdd) add(mode HandleMode, p pod, conf []byte) (*current.Result, error) {
	return kddPlugin(mode).Allocate(p.args(conf))
}

func (k *kdd) mustAdd(mode HandleMode, p pod) netip.Addr {
	k.t.Helper()
	res, err := k.add(mode, p, k.conf(nil))
	if err != nil {
		k.t.Fatalf("ADD %+v: %v", p, err)
	}
	if len(res.IPs) != 1 {
		k.t.Fatalf("ADD %+v: %d IPs, want 1", p, len(res.IPs))
	}
	return netip.MustParseAddr(res.IPs[0].Address.IP.String())
}

func (k *kdd) mustDel(mode HandleMode, p pod) {
	k.t.Helper()
	if err := kddPlugin(mode).Del(p.args(k.conf(nil))); err != nil {
		k.t.Fatalf("DEL %+v: %v", p, err)
	}
}

func (k *kdd) state() *Snapshot {
	k.t.Helper()
	s, err := KubeState(k.ctx, k.cfg)
	if err != nil {
		k.t.Fatal(err)
	}
	return s
}

// objects returns the IPAM objects as the apiserver returns them, by
// "Kind/name".
func (k *kdd) objects() map[string]map[string]any {
	k.t.Helper()
	out := map[string]map[string]any{}
	for _, kd := range []kind{kindBlock, kindHandle, kindAffinity} {
		l, err := k.dyn.Resource(kd.gvr).List(k.ctx, metav1.ListOptions{})
		if err != nil {
			k.t.Fatal(err)
		}
		for _, u := range l.Items {
			out[u.GetKind()+"/"+u.GetName()] = u.Object
		}
	}
	return out
}
