package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/backends"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/repair"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore/datastoretest"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// kube is one real kube-apiserver for the package, started by the first
// test that needs it.
var kube kubetest.Shared

func TestMain(m *testing.M) { kube.Main(m) }

const dsNetwork = "net1"

// dsWorld is Calico's data in one datastore, planted through the
// datastore interface (as calico-ipam leaves it), and the node's records
// where the plugin keeps them with that datastore: etcd's store in
// Calico's etcd, or the node's file store beside the Kubernetes datastore.
type dsWorld struct {
	t       *testing.T
	b       *datastoretest.Backend
	records store.Store
	recs    snapshot.Records
	args    []string
}

func etcdWorld(t *testing.T) *dsWorld {
	srv := etcdtest.Start(t)
	return &dsWorld{t: t, b: backends.Etcd(t, srv.Client()),
		records: etcdstore.NewWithClient(srv.Client(), recordsPrefix, "node1", 5*time.Second),
		recs:    &snapshot.EtcdRecords{Client: srv.Client(), Prefix: recordsPrefix},
		args:    []string{"--etcd-endpoints", srv.Endpoint()}}
}

func kubeWorld(t *testing.T) *dsWorld {
	srv := backends.KubeServer(t, &kube)
	dir := filepath.Join(t.TempDir(), "records")
	fs, err := filestore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The commands run as an identity bound to deploy/'s ClusterRole and
	// nothing else (the test plants data as the admin): every audit and
	// repair here shows that the role grants what they call (issue 20,
	// finding 7 took the role down to exactly that).
	if err := srv.Apply(filepath.Join("..", "..", "..", "deploy", "safe-ipam-rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	kubeWorlds++
	asRole, err := srv.User(fmt.Sprintf("ds-world-%d", kubeWorlds), "safe-ipam")
	if err != nil {
		t.Fatal(err)
	}
	return &dsWorld{t: t, b: backends.Kube(t, srv), records: fs,
		recs: &snapshot.StoreRecords{Store: fs, Of: "node1", Where: "file store " + dir},
		args: []string{"--datastore", "kubernetes", "--kubeconfig", asRole, "--store-dir", dir}}
}

// kubeWorlds names each world's identity apart on the shared server.
var kubeWorlds int

var datastores = []struct {
	name  string
	world func(t *testing.T) *dsWorld
}{{"etcd", etcdWorld}, {"kubernetes", kubeWorld}}

func (w *dsWorld) ctx() context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	w.t.Cleanup(cancel)
	return c
}

// allocate gives the next free address of the node's block to handle,
// block first and then the handle document, and returns the address.
func (w *dsWorld) allocate(cidr, node, handle string, secondary map[string]string) string {
	w.t.Helper()
	p := netip.MustParsePrefix(cidr)
	blk, err := w.b.Store.Block(w.ctx(), p)
	if err != nil {
		w.t.Fatal(err)
	}
	if blk == nil {
		b, err := calico.NewBlock(p, 1000)
		if err != nil {
			w.t.Fatal(err)
		}
		b.ClaimFor(node, time.Now())
		blk = &datastore.Block{Block: b}
		w.b.Affinity(w.t, node, p, false)
	}
	ords, err := blk.Block.Allocate(1, handle, secondary)
	if err != nil {
		w.t.Fatal(err)
	}
	w.write(datastore.Change{Blocks: []*datastore.Block{blk}})
	w.count(handle, p, 1)
	ip, _ := blk.Block.IP(ords[0])
	return ip.String()
}

// count adds n to the handle's count in the block (a new handle at 0).
func (w *dsWorld) count(handle string, p netip.Prefix, n int) {
	w.t.Helper()
	h, err := w.b.Store.Handle(w.ctx(), handle)
	if err != nil {
		w.t.Fatal(err)
	}
	if h == nil {
		h = &datastore.Handle{ID: handle, Handle: calico.NewHandle()}
	}
	h.Handle.Add(p, n)
	w.write(datastore.Change{Handle: h})
}

// release frees the handle's addresses in the block and drops the handle.
func (w *dsWorld) release(cidr, handle string) {
	w.t.Helper()
	blk, err := w.b.Store.Block(w.ctx(), netip.MustParsePrefix(cidr))
	if err != nil || blk == nil {
		w.t.Fatalf("block %s: %v", cidr, err)
	}
	blk.Block.ReleaseHandle(handle)
	h, err := w.b.Store.Handle(w.ctx(), handle)
	if err != nil || h == nil {
		w.t.Fatalf("handle %s: %v", handle, err)
	}
	h.Handle = nil
	w.write(datastore.Change{Blocks: []*datastore.Block{blk}, Handle: h})
}

func (w *dsWorld) write(c datastore.Change) {
	w.t.Helper()
	if err := w.b.Store.Write(w.ctx(), c); err != nil {
		w.t.Fatal(err)
	}
}

// record writes node1's committed record of container cid holding ip.
func (w *dsWorld) record(cid, ip, pod string) {
	w.t.Helper()
	rec := &record.Record{Attachment: record.Attachment{Network: dsNetwork, ContainerID: cid, IfName: "eth0"},
		PodNamespace: "default", PodName: pod, Node: "node1", Handle: dsNetwork + "." + cid, State: record.Committed,
		IPs: []string{ip + "/26"}, Created: time.Now(), Updated: time.Now()}
	if _, err := w.records.Swap(w.ctx(), rec.Attachment, nil, rec); err != nil {
		w.t.Fatal(err)
	}
}

func (w *dsWorld) liveFile(atts ...liveness.Running) string {
	w.t.Helper()
	return writeLiveFile(w.t, atts...)
}

// run runs `safe-ipam audit|repair` against the world's datastore.
func (w *dsWorld) run(fix bool, args ...string) (int, *repair.Report, string) {
	w.t.Helper()
	full := append([]string{"--json", "--node", "node1", "--network", dsNetwork, "--cni-cache=", "--min-age", "1m"}, w.args...)
	if fix {
		full = append(full, "--settle=0")
	}
	var stdout, stderr bytes.Buffer
	code := runCmd(append(full, args...), &stdout, &stderr, fix)
	var rep repair.Report
	if code != audit.ExitError {
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			w.t.Fatalf("report is not JSON: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
	}
	return code, &rep, stderr.String()
}

// state is Calico's data in a form both datastores share: every address
// and its handle, every handle document's counts, every affinity.
func (w *dsWorld) state() []string {
	w.t.Helper()
	var out []string
	_, err := w.b.Store.Scan(w.ctx(), datastore.Visitor{
		Block: func(b *calico.Block) {
			for _, h := range b.Held() {
				out = append(out, "address "+h.IP.String()+" "+h.Attribute.Handle())
			}
		},
		Handle: func(id string, counts json.RawMessage, _ datastore.Version) {
			var m map[string]int
			_ = json.Unmarshal(counts, &m)
			out = append(out, fmt.Sprintf("handle %s %v", id, m))
		},
		Affinity:    func(node string, cidr netip.Prefix) { out = append(out, "affinity "+node+" "+cidr.String()) },
		Undecodable: func(key string, err error) { out = append(out, "undecodable") },
	})
	if err != nil {
		w.t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// brief is a finding as both datastores must report it.
func brief(fs []audit.Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = fmt.Sprintf("%s %s %s releasable=%v", f.Kind, f.Address, f.Handle, f.Releasable)
	}
	return out
}

func recent(pod string) map[string]string {
	return map[string]string{"namespace": "default", "pod": pod, "node": "node1", "timestamp": time.Now().Add(-time.Hour).UTC().String()}
}

// Every planted defect is found and fixed the same on the Kubernetes
// datastore as on etcd: the same findings, the same actions and outcomes,
// and the same data after repair --apply.
func TestKubeAndEtcdFindAndFixTheSameDefects(t *testing.T) {
	const blk = "10.244.0.0/26"
	tests := []struct {
		name  string
		plant func(w *dsWorld) []liveness.Running
		kinds map[audit.Kind]int
		code  int // of repair --apply
	}{
		{"pod-name handle whose owner is gone", func(w *dsWorld) []liveness.Running {
			w.allocate(blk, "node1", "default.web-0", recent("web-0"))
			ip := w.allocate(blk, "node1", "net1.c1", recent("db-0"))
			w.record("c1", ip, "db-0")
			return []liveness.Running{{ContainerID: "c1", IfName: "eth0", PodNamespace: "default", PodName: "db-0"}}
		}, map[audit.Kind]int{audit.PodNameHandle: 1}, audit.ExitClean},
		{"leak", func(w *dsWorld) []liveness.Running {
			w.allocate(blk, "node1", "net1.gone", recent("old"))
			ip := w.allocate(blk, "node1", "net1.c1", recent("db-0"))
			w.record("c1", ip, "db-0")
			return []liveness.Running{{ContainerID: "c1", IfName: "eth0"}}
		}, map[audit.Kind]int{audit.Leak: 1}, audit.ExitClean},
		{"early release re-claimed", func(w *dsWorld) []liveness.Running {
			ip := w.allocate(blk, "node1", "net1.c2", recent("web-2"))
			w.record("c2", ip, "web-2")
			w.release(blk, "net1.c2")
			return []liveness.Running{{ContainerID: "c2", IfName: "eth0"}}
		}, map[audit.Kind]int{audit.EarlyRelease: 1}, audit.ExitClean},
		{"handle count mismatch", func(w *dsWorld) []liveness.Running {
			ip := w.allocate(blk, "node1", "net1.c1", recent("db-0"))
			w.record("c1", ip, "db-0")
			w.count("net1.c1", netip.MustParsePrefix(blk), 4)
			return []liveness.Running{{ContainerID: "c1", IfName: "eth0"}}
		}, map[audit.Kind]int{audit.Inconsistent: 1}, audit.ExitClean},
		{"duplicate is refused", func(w *dsWorld) []liveness.Running {
			ip := w.allocate(blk, "node1", "net1.c4", recent("web-4"))
			w.record("c3", ip, "web-3")
			w.record("c4", ip, "web-4")
			return []liveness.Running{{ContainerID: "c3", IfName: "eth0"}, {ContainerID: "c4", IfName: "eth0"}}
		}, map[audit.Kind]int{audit.Duplicate: 1}, audit.ExitFindings},
		{"inconsistent documents are reported, not rewritten", func(w *dsWorld) []liveness.Running {
			ip := w.allocate(blk, "node1", "net1.c1", recent("db-0"))
			w.record("c1", ip, "db-0")
			w.b.Affinity(w.t, "node1", netip.MustParsePrefix("10.244.9.0/26"), false)
			w.b.Garble(w.t, netip.MustParsePrefix("10.244.1.0/26"))
			return []liveness.Running{{ContainerID: "c1", IfName: "eth0"}}
		}, map[audit.Kind]int{audit.Inconsistent: 2}, audit.ExitFindings},
		{"no liveness: nothing is judged gone", func(w *dsWorld) []liveness.Running {
			w.allocate(blk, "node1", "default.web-0", recent("web-0"))
			w.allocate(blk, "node1", "net1.gone", recent("old"))
			return nil
		}, map[audit.Kind]int{audit.PodNameHandle: 1, audit.Unverified: 1}, audit.ExitFindings},
		{"an empty source beside pod addresses is not trusted", func(w *dsWorld) []liveness.Running {
			w.allocate(blk, "node1", "default.web-0", recent("web-0"))
			return []liveness.Running{}
		}, map[audit.Kind]int{audit.PodNameHandle: 1}, audit.ExitFindings},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var findings, actions, after []string
			for i, ds := range datastores {
				w := ds.world(t)
				live := tt.plant(w)
				var args []string
				if live != nil {
					args = []string{"--live", w.liveFile(live...)}
				}
				code, rep, stderr := w.run(false, args...)
				if !reflect.DeepEqual(kinds(rep.Findings), tt.kinds) || code == audit.ExitError {
					t.Fatalf("%s: audit exit %d, findings %+v, want %v; %s", ds.name, code, rep.Findings, tt.kinds, stderr)
				}
				code, rep, stderr = w.run(true, append(args, "--apply")...)
				if code != tt.code {
					t.Fatalf("%s: repair exit %d, want %d; actions %+v refused %+v; %s", ds.name, code, tt.code, rep.Actions, rep.Refused, stderr)
				}
				var acts []string
				for _, a := range rep.Actions {
					acts = append(acts, a.Kind+" "+a.Handle+" "+a.Address+" "+a.Outcome)
				}
				if i == 0 {
					findings, actions, after = brief(rep.Findings), acts, w.state()
					continue
				}
				if got := brief(rep.Findings); !reflect.DeepEqual(got, findings) {
					t.Errorf("%s findings %v; etcd found %v", ds.name, got, findings)
				}
				if !reflect.DeepEqual(acts, actions) {
					t.Errorf("%s actions %v; etcd %v", ds.name, acts, actions)
				}
				if got := w.state(); !reflect.DeepEqual(got, after) {
					t.Errorf("%s data after repair:\n%s\netcd:\n%s", ds.name, strings.Join(got, "\n"), strings.Join(after, "\n"))
				}
			}
		})
	}
}

// With the kubernetes datastore its API server is also the liveness
// source unless another is named: a node the API cannot speak for (not
// registered) fails the audit; --live sets the pods source aside, and
// --cni-cache= turns liveness off.
func TestKubeDatastoreAPIServerIsTheDefaultLiveness(t *testing.T) {
	w := kubeWorld(t)
	w.allocate("10.244.0.0/26", "node1", "default.web-0", recent("web-0"))
	base := append([]string{"--json", "--node", "node-unregistered", "--network", dsNetwork}, w.args...)
	tests := []struct {
		name     string
		args     []string
		code     int
		liveness string
	}{
		{"pods API by default", nil, audit.ExitError, ""},
		{"--live replaces it", []string{"--live", w.liveFile(liveness.Running{ContainerID: "x", IfName: "eth0"})}, audit.ExitFindings, "file"},
		{"--cni-cache= turns liveness off", []string{"--cni-cache="}, audit.ExitFindings, "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runCmd(append(base, tt.args...), &stdout, &stderr, false)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; %s", code, tt.code, stderr.String())
			}
			if tt.code == audit.ExitError {
				if !strings.Contains(stderr.String(), "pods API") {
					t.Errorf("stderr %q does not name the pods API", stderr.String())
				}
				return
			}
			var rep repair.Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || !strings.HasPrefix(rep.Liveness, tt.liveness) {
				t.Errorf("liveness %q, want %q (%v)", rep.Liveness, tt.liveness, err)
			}
		})
	}
}

// A calico-ipam writing between repair's read and its write on the
// Kubernetes datastore is never overwritten: the write is refused (409),
// and the retry from a fresh read either applies on top of the racer's
// allocation or, when its own first half already landed, stops.
func TestKubeRepairLosesTheRace(t *testing.T) {
	const blk = "10.244.0.0/26"
	tests := []struct {
		name  string
		plant func(w *dsWorld) liveness.Running
		kind  string
		done  bool
	}{
		{"release", func(w *dsWorld) liveness.Running {
			w.allocate(blk, "node1", "net1.gone", recent("old"))
			ip := w.allocate(blk, "node1", "net1.c1", recent("db-0"))
			w.record("c1", ip, "db-0")
			return liveness.Running{ContainerID: "c1", IfName: "eth0"}
		}, repair.ReleaseHandle, true},
		{"re-claim", func(w *dsWorld) liveness.Running {
			ip := w.allocate(blk, "node1", "net1.c2", recent("web-2"))
			w.record("c2", ip, "web-2")
			w.release(blk, "net1.c2")
			return liveness.Running{ContainerID: "c2", IfName: "eth0"}
		}, repair.Reclaim, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := kubeWorld(t)
			att := tt.plant(w)
			snap, err := snapshot.Load(w.ctx(), w.b.Store, w.recs, dsNetwork)
			if err != nil {
				t.Fatal(err)
			}
			live := liveness.NewView("test", "node1", []liveness.Running{att})
			actions, _ := repair.Plan(snap, audit.Analyze(snap, audit.Options{Liveness: live, MinAge: time.Minute}), live)
			if len(actions) != 1 || actions[0].Kind != tt.kind {
				t.Fatalf("plan %+v", actions)
			}
			var racer string
			r := &repair.Repairer{Data: w.b.Store, Records: w.recs, Snap: snap, Live: live, BeforeCommit: func(_ repair.Action, attempt int) {
				if attempt == 1 { // a concurrent calico-ipam ADD lands first
					racer = w.allocate(blk, "node1", "net1.racer", recent("racer"))
				}
			}}
			err = r.Apply(w.ctx(), actions)
			if done := err == nil; done != tt.done {
				t.Fatalf("apply: %v (%+v); want done %v", err, actions, tt.done)
			}
			state := strings.Join(w.state(), "\n")
			if !strings.Contains(state, "address "+racer+" net1.racer") {
				t.Errorf("the racer's allocation %s was overwritten:\n%s", racer, state)
			}
			if actions[0].Address == racer {
				t.Errorf("the racer got the address repair acted on")
			}
		})
	}
}

// The Kubernetes datastore fails closed: an identity without RBAC, an API
// server that is down, or a cluster without Calico's CRDs is exit 2 with
// a message that says which, never "no Calico data".
func TestKubeDatastoreFailsClosed(t *testing.T) {
	w := kubeWorld(t)
	w.allocate("10.244.0.0/26", "node1", "default.web-0", recent("web-0"))
	srv := kube.Get(t)
	if err := srv.Apply(filepath.Join("..", "..", "..", "deploy", "safe-ipam-rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	withRole, err := srv.User("audit-rbac", "safe-ipam")
	if err != nil {
		t.Fatal(err)
	}
	noRole, err := srv.User("audit-norole", "")
	if err != nil {
		t.Fatal(err)
	}
	bare := kubetest.Start(t) // no Calico CRDs
	silent := silentServer(t)
	tests := []struct {
		name, kubeconfig, says string
		code                   int
		timeout                string
	}{
		{"deploy's ClusterRole suffices", withRole, "", audit.ExitFindings, "20s"},
		{"no RBAC", noRole, "forbidden", audit.ExitError, "20s"},
		{"API server down", kubetest.Repoint(t, withRole, "https://127.0.0.1:1"), "127.0.0.1:1", audit.ExitError, "20s"},
		{"API server never answers", kubetest.Repoint(t, withRole, "https://"+silent), silent, audit.ExitError, "3s"},
		{"no Calico CRDs", bare.Kubeconfig, "not served", audit.ExitError, "20s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := repair.Run([]string{"--datastore", "kubernetes", "--kubeconfig", tt.kubeconfig, "--store-dir", t.TempDir(),
				"--node", "node1", "--network", dsNetwork, "--cni-cache=", "--timeout", tt.timeout}, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.says) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q", code, stderr.String(), tt.code, tt.says)
			}
		})
	}
}

// silentServer accepts connections and never answers: an API server that
// hangs must time out as an error, never read as empty.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
