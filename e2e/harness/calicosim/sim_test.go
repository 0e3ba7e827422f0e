package calicosim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
)

const (
	network = "k8s-pod-network"
	node1   = "node1"
)

// sim is a real embedded etcd holding a Calico datastore, and ways to run
// the simulator against it in-process.
type sim struct {
	t    *testing.T
	etcd *etcdtest.Server
	cli  *clientv3.Client
	ctx  context.Context
}

// newSim starts etcd with node1's Node resource and the given pools
// (name, CIDR, block size).
func newSim(t *testing.T, pools ...poolSpec) *sim {
	t.Helper()
	e := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s := &sim{t: t, etcd: e, cli: e.Client(), ctx: ctx}
	s.reset(t, pools...)
	return s
}

// reset empties the datastore and seeds it again, so that subtests can
// share one etcd. It also makes the sim report to t.
func (s *sim) reset(t *testing.T, pools ...poolSpec) *sim {
	t.Helper()
	s.t = t
	if _, err := s.cli.Delete(s.ctx, "/calico/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if err := SeedNode(s.ctx, s.cli, node1); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if err := SeedIPPool(s.ctx, s.cli, p.name, p.cidr, p.blockSize); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

type poolSpec struct {
	name      string
	cidr      string
	blockSize int
}

// conf is a calico-ipam config for this etcd, changed by the edits, which
// set fields of the top level or (keys "ipam.x") of the ipam section.
func (s *sim) conf(edits map[string]any) []byte {
	c := map[string]any{
		"cniVersion": "1.0.0", "name": network, "type": "calico-ipam",
		"datastore_type": "etcdv3", "etcd_endpoints": s.etcd.Endpoint(), "nodename": node1,
	}
	ipam := map[string]any{"type": "calico-ipam"}
	for k, v := range edits {
		if sub, ok := cutIPAM(k); ok {
			ipam[sub] = v
		} else if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	c["ipam"] = ipam
	data, err := json.Marshal(c)
	if err != nil {
		s.t.Fatal(err)
	}
	return data
}

func cutIPAM(k string) (string, bool) {
	const p = "ipam."
	if len(k) > len(p) && k[:len(p)] == p {
		return k[len(p):], true
	}
	return "", false
}

// plugin is an in-process simulator without the host lock: correctness
// must come from etcd transactions alone.
func (s *sim) plugin(mode HandleMode) *Plugin {
	env := map[string]string{EnvLockFile: NoLock, EnvHandles: string(mode)}
	return New(func(k string) string { return env[k] }, &bytes.Buffer{}, &bytes.Buffer{})
}

// pod is one CNI attachment: container ID and pod identity.
type pod struct {
	container string
	namespace string
	name      string
}

func (p pod) args(conf []byte) *skel.CmdArgs {
	a := &skel.CmdArgs{ContainerID: p.container, Netns: "/var/run/netns/" + p.container, IfName: "eth0", Path: "/opt/cni/bin", StdinData: conf}
	if p.namespace != "" || p.name != "" {
		a.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + p.namespace + ";K8S_POD_NAME=" + p.name + ";K8S_POD_INFRA_CONTAINER_ID=" + p.container
	}
	return a
}

func (s *sim) add(mode HandleMode, p pod, conf []byte) (*current.Result, error) {
	return s.plugin(mode).Allocate(p.args(conf))
}

func (s *sim) mustAdd(mode HandleMode, p pod) netip.Prefix {
	s.t.Helper()
	res, err := s.add(mode, p, s.conf(nil))
	if err != nil {
		s.t.Fatalf("ADD %+v: %v", p, err)
	}
	if len(res.IPs) != 1 {
		s.t.Fatalf("ADD %+v: %d IPs, want 1", p, len(res.IPs))
	}
	return ipnetPrefix(s.t, res.IPs[0].Address.String())
}

func (s *sim) mustDel(mode HandleMode, p pod) {
	s.t.Helper()
	if err := s.plugin(mode).Del(p.args(s.conf(nil))); err != nil {
		s.t.Fatalf("DEL %+v: %v", p, err)
	}
}

func (s *sim) state() *Snapshot {
	s.t.Helper()
	st, err := State(s.ctx, s.cli)
	if err != nil {
		s.t.Fatal(err)
	}
	if bad := st.Inconsistencies(); len(bad) > 0 {
		s.t.Fatalf("inconsistent Calico state: %v", bad)
	}
	return st
}

// value returns the raw etcd value of key, "" when absent.
func (s *sim) value(key string) string {
	s.t.Helper()
	resp, err := s.cli.Get(s.ctx, key)
	if err != nil {
		s.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func ipnetPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}
