package guard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/cni/backends"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// binDir holds copies of the test binary named like delegates; a copy, not
// a link, because safe-ipam refuses a delegate that is its own binary.
var binDir string

func TestMain(m *testing.M) {
	if isFakeDelegate() {
		runFakeDelegate()
		return
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "safe-ipam-guard-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	for _, name := range fakeNames {
		if err := copyFile(os.Args[0], filepath.Join(dir, name)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	defer sharedEtcd.close()
	return m.Run()
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// sharedEtcd is one real etcd server for the package; rigs use their own
// key prefixes on it.
var sharedEtcd etcdOnce

type etcdOnce struct {
	once   sync.Once
	server *etcdtest.Server
	err    error
	dir    string
}

func (e *etcdOnce) get(t *testing.T) *etcdtest.Server {
	e.once.Do(func() {
		e.dir, e.err = os.MkdirTemp("", "safe-ipam-etcd-")
		if e.err == nil {
			e.server, e.err = etcdtest.New(e.dir)
		}
	})
	if e.err != nil {
		t.Fatalf("etcd: %v", e.err)
	}
	return e.server
}

func (e *etcdOnce) close() {
	if e.server != nil {
		e.server.Close()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// storeKinds runs a test once per store.
var storeKinds = []string{"file", "etcd"}

// rig is one plugin config with its own fake delegate state and store.
type rig struct {
	t          *testing.T
	kind       string
	fakeDir    string
	storeDir   string
	prefix     string
	cniVersion string
	delegate   string
	handles    string
	node       string
	extraIPAM  map[string]any
	crashAt    guard.Step
	calicoEtcd string // Calico's etcd_endpoints; a placeholder unless a test reads Calico's data
	// calico is Calico's data for the guards built over a store
	// (guardOver); run reads Calico at calicoEtcd instead.
	calico *fakeCalico
}

var rigCount int

func newRig(t *testing.T, kind string) *rig {
	t.Helper()
	rigCount++
	r := &rig{t: t, kind: kind, fakeDir: t.TempDir(), storeDir: filepath.Join(t.TempDir(), "records"),
		prefix: fmt.Sprintf("/test%d", rigCount), cniVersion: "1.0.0", delegate: "calico-ipam", handles: "container", node: "node1",
		calicoEtcd: "http://calico-etcd:2379", calico: &fakeCalico{}}
	t.Setenv(fakeDirEnv, r.fakeDir)
	return r
}

func (r *rig) storeConf() map[string]any {
	if r.kind == "etcd" {
		return map[string]any{"type": "etcd", "endpoints": []string{sharedEtcd.get(r.t).Endpoint()}, "prefix": r.prefix}
	}
	return map[string]any{"type": "file", "dir": r.storeDir}
}

// conf is a kubelet-style plugin config with Calico keys that must reach
// the delegate unchanged.
func (r *rig) conf() []byte {
	ipam := map[string]any{
		"type": "safe-ipam", "delegate": map[string]any{"type": r.delegate}, "delegateHandles": r.handles,
		"store": r.storeConf(), "cacheDir": filepath.Join(r.fakeDir, "cache"), "logFile": filepath.Join(r.fakeDir, "safe-ipam.log"),
		"logLevel": "debug", "ipv4_pools": []string{"10.0.0.0/24"}, "assign_ipv6": "false",
	}
	for k, v := range r.extraIPAM {
		ipam[k] = v
	}
	conf := map[string]any{
		"cniVersion": r.cniVersion, "name": "net1", "type": "ptp", "datastore_type": "etcdv3",
		"etcd_endpoints": r.calicoEtcd, "nodename": r.node, "kubernetes": map[string]any{"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"},
		"ipam": ipam,
	}
	data, err := json.Marshal(conf)
	if err != nil {
		r.t.Fatal(err)
	}
	return data
}

func env(cid string) delegate.Env {
	return delegate.Env{ContainerID: cid, NetNS: "/var/run/netns/" + cid, IfName: "eth0", Path: binDir,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=" + cid + ";K8S_POD_UID=uid-" + cid}
}

// errCrashed stands for a process killed at a step.
var errCrashed = errors.New("crashed")

type crash struct{}

// run opens a guard for the verb and runs it, as one plugin process would.
func (r *rig) run(verb string, e delegate.Env, stdin []byte) (res types.Result, err error) {
	cfg, err := config.Parse(stdin)
	if err != nil {
		return nil, err
	}
	o, err := invocation.Open(context.Background(), invocation.Call{Verb: verb, Env: e, Config: cfg, Log: slog.New(slog.DiscardHandler), Backends: backends.Full()})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	g := o.Guard
	if r.crashAt != "" {
		g.Owner = nil // records of a "crashed" run must not look owned by this live test process
		g.At = func(s guard.Step) {
			if s == r.crashAt {
				panic(crash{})
			}
		}
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(crash); !ok {
					panic(p)
				}
				res, err = nil, errCrashed
			}
		}()
	}
	ctx := context.Background()
	switch verb {
	case "ADD":
		return g.Add(ctx, e)
	case "DEL":
		return nil, g.Del(ctx, e)
	case "CHECK":
		return nil, g.Check(ctx, e)
	case "GC":
		return nil, g.GC(ctx, e, stdin)
	case "STATUS":
		return nil, g.Status(ctx, e)
	}
	r.t.Fatalf("unknown verb %s", verb)
	return nil, nil
}

func (r *rig) add(cid string) types.Result {
	r.t.Helper()
	res, err := r.run("ADD", env(cid), r.conf())
	if err != nil {
		r.t.Fatalf("ADD %s: %v", cid, err)
	}
	return res
}

func (r *rig) del(cid string) {
	r.t.Helper()
	if _, err := r.run("DEL", env(cid), r.conf()); err != nil {
		r.t.Fatalf("DEL %s: %v", cid, err)
	}
}

// store opens the rig's store directly, as a reader outside the plugin.
func (r *rig) store() store.Store {
	r.t.Helper()
	if r.kind == "etcd" {
		return etcdstore.NewWithClient(sharedEtcd.get(r.t).Client(), r.prefix, r.node, 5*time.Second)
	}
	s, err := filestore.Open(r.storeDir)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

func (r *rig) records() []*record.Record {
	r.t.Helper()
	recs, err := r.store().List(context.Background(), "net1")
	if err != nil {
		r.t.Fatal(err)
	}
	return recs
}

func (r *rig) record(cid string) *record.Record {
	r.t.Helper()
	rec, err := r.store().Get(context.Background(), record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"})
	if err != nil {
		r.t.Fatal(err)
	}
	return rec
}

// held is the fake delegate's view: handle -> addresses.
func (r *rig) held() map[string][]string {
	r.t.Helper()
	st := fakeState{Handles: map[string][]string{}}
	data, err := os.ReadFile(filepath.Join(r.fakeDir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return st.Handles
	}
	if err != nil || json.Unmarshal(data, &st) != nil {
		r.t.Fatalf("fake state: %v", err)
	}
	return st.Handles
}

func (r *rig) calls(command string) []fakeCall {
	r.t.Helper()
	f, err := os.Open(filepath.Join(r.fakeDir, "calls.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	var out []fakeCall
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c fakeCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			r.t.Fatal(err)
		}
		if command == "" || c.Command == command {
			out = append(out, c)
		}
	}
	return out
}

// seedHandle puts an address under a handle in the fake delegate, as a
// legacy or upgraded cluster has it.
func (r *rig) seedHandle(handle, addr string) {
	r.t.Helper()
	err := withState(r.fakeDir, func(st *fakeState) error {
		st.Handles[handle] = append(st.Handles[handle], addr)
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// guardOver builds a guard.Guard for conf directly over st, for tests that put
// a store in between to stage a race or a lost answer.
func (r *rig) guardOver(st store.Store, conf []byte) *guard.Guard {
	r.t.Helper()
	return r.guardLogging(st, conf, slog.New(slog.DiscardHandler))
}

// guardLogging is guardOver logging to log.
func (r *rig) guardLogging(st store.Store, conf []byte, log *slog.Logger) *guard.Guard {
	r.t.Helper()
	cfg, err := config.Parse(conf)
	if err != nil {
		r.t.Fatal(err)
	}
	d, err := delegate.Resolve(context.Background(), cfg.Delegate.Type, "", binDir, "")
	if err != nil {
		r.t.Fatal(err)
	}
	node, err := cfg.Node()
	if err != nil {
		r.t.Fatal(err)
	}
	version, err := delegate.Negotiate(cfg.CNIVersion, d.Versions)
	if err != nil {
		r.t.Fatal(err)
	}
	return guard.New(guard.Parts{Config: cfg, Node: node, Version: version, Delegate: d, Store: st, Calico: r.calico, Log: log})
}

// resultIPs lists a result's addresses, in CNI 1.0.0's form.
func resultIPs(res types.Result) ([]string, error) {
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, err
	}
	ips := make([]string, 0, len(r.IPs))
	for _, ip := range r.IPs {
		ips = append(ips, ip.Address.String())
	}
	return ips, nil
}
