package gc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/gc"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// The runtime suite (e2e/runtime) runs gc against a real containerd and
// calico-ipam; these tests pin its refusals and its plan on a node with a
// file store and a delegate that logs its calls.

// delegateScript answers VERSION like calico-ipam and logs every other
// command with its container ID.
const delegateScript = `#!/bin/sh
if [ "$CNI_COMMAND" = VERSION ]; then
  echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}'
  exit 0
fi
echo "$CNI_COMMAND $CNI_CONTAINERID" >> "$(dirname "$0")/calls"
`

type node struct {
	dir, conf, bin, records string
	// etcd, when set, holds the records (a store machines share).
	etcd *etcdtest.Server
}

// newEtcdNode is newNode with its records in etcd.
func newEtcdNode(t *testing.T) *node {
	n := newNode(t)
	n.etcd = etcdtest.Start(t)
	data, err := os.ReadFile(n.conf)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`{"dir":"`+n.records+`","type":"file"}`), []byte(`{"endpoints":["`+n.etcd.Endpoint()+`"],"type":"etcd"}`), 1)
	if err := os.WriteFile(n.conf, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// store opens the node's record store, and closes it when the test ends
// (the etcd store's client is the test server's).
func (n *node) store(t *testing.T) store.Store {
	t.Helper()
	if n.etcd != nil {
		return etcdstore.NewWithClient(n.etcd.Client(), config.DefaultEtcdPrefix, "node1", 5*time.Second)
	}
	st, err := filestore.Open(n.records)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newNode(t *testing.T) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{dir: dir, conf: filepath.Join(dir, "net.conflist"), bin: filepath.Join(dir, "bin"), records: filepath.Join(dir, "records")}
	if err := os.MkdirAll(n.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.bin, "calico-ipam"), []byte(delegateScript), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := map[string]any{"cniVersion": "1.0.0", "name": "k8s-pod-network", "plugins": []any{map[string]any{
		"type": "calico", "datastore_type": "etcdv3", "etcd_endpoints": "http://127.0.0.1:2379", "nodename": "node1",
		"ipam": map[string]any{"type": "safe-ipam", "delegate": map[string]any{"type": "calico-ipam"},
			"store": map[string]any{"type": "file", "dir": n.records}, "cacheDir": "", "logFile": "", "gcGracePeriod": "1m"},
	}}}
	data, _ := json.Marshal(conf)
	if err := os.WriteFile(n.conf, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// record writes a committed record written age ago.
func (n *node) record(t *testing.T, cid, ifname string, age time.Duration) {
	t.Helper()
	n.recordBy(t, "", cid, ifname, age)
}

// recordBy is record as host wrote it ("": an older record, no host).
func (n *node) recordBy(t *testing.T, host, cid, ifname string, age time.Duration) {
	t.Helper()
	st := n.store(t)
	at := time.Now().Add(-age).UTC()
	rec := &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: cid, IfName: ifname},
		PodNamespace: "default", PodName: "pod-" + cid, Node: "node1", Host: host, Handle: "k8s-pod-network." + cid,
		State: record.Committed, IPs: []string{"10.244.0.1/26"}, Created: at, Updated: at}
	if _, err := st.Swap(context.Background(), rec.Attachment, nil, rec); err != nil {
		t.Fatal(err)
	}
}

func (n *node) left(t *testing.T) []string {
	t.Helper()
	st := n.store(t)
	recs, err := st.List(context.Background(), "k8s-pod-network")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.ContainerID+"/"+r.IfName)
	}
	slices.Sort(out)
	return out
}

func (n *node) calls(t *testing.T) []string {
	data, err := os.ReadFile(filepath.Join(n.bin, "calls"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	calls := strings.Split(strings.TrimSpace(string(data)), "\n")
	slices.Sort(calls)
	return calls
}

func (n *node) live(t *testing.T, atts []liveness.Running) string {
	t.Helper()
	path := filepath.Join(n.dir, "live.json")
	data, _ := json.Marshal(atts)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (n *node) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := gc.Run(append([]string{"--conf", n.conf, "--cni-bin-dir", n.bin}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestDryRunThenApply(t *testing.T) {
	n := newNode(t)
	n.record(t, "running", "eth0", time.Hour)
	n.record(t, "running", "net1", time.Hour)
	n.record(t, "gone", "eth0", time.Hour)
	n.record(t, "creating", "eth0", time.Second)
	live := n.live(t, []liveness.Running{{ContainerID: "running", IfName: "eth0", PodNamespace: "default", PodName: "pod-running"}})
	code, out, errOut := n.run(t, "--live", live)
	if code != admin.ExitAttention || !strings.Contains(out, "would release") || !strings.Contains(out, "gone/eth0") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if got := n.left(t); len(got) != 4 || n.calls(t) != nil {
		t.Fatalf("a dry run changed something: records %v, delegate calls %v", got, n.calls(t))
	}
	// A file names interfaces: net1 of the running container is not listed.
	code, out, errOut = n.run(t, "--live", live, "--apply", "--json")
	if code != admin.ExitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if got := n.left(t); !slices.Equal(got, []string{"creating/eth0", "running/eth0"}) {
		t.Errorf("records after apply: %v", got)
	}
	if got := n.calls(t); !slices.Equal(got, []string{"DEL gone", "DEL running"}) {
		t.Errorf("delegate calls %q, want one DEL each for gone and running/net1", got)
	}
	var r gc.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Applied == nil || !*r.Applied || len(r.Release) != 2 {
		t.Errorf("JSON report %s (%v)", out, err)
	}
}

// Two machines under one Calico node name (a stale nodename) share the
// node's records in a store machines share (etcd): gc judges only its own
// host's records, and those without a host, against its runtime; another
// host's are kept and said.
func TestKeepsAnotherHostsRecords(t *testing.T) {
	n := newEtcdNode(t)
	n.record(t, "running", "eth0", time.Hour)
	n.recordBy(t, "other-machine", "theirs", "eth0", time.Hour)
	n.recordBy(t, record.ThisHost(), "mine", "eth0", time.Hour)
	n.record(t, "old", "eth0", time.Hour)
	live := n.live(t, []liveness.Running{{ContainerID: "running", IfName: "eth0"}})
	code, out, errOut := n.run(t, "--live", live, "--apply")
	if code != admin.ExitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if got := n.left(t); !slices.Equal(got, []string{"running/eth0", "theirs/eth0"}) {
		t.Errorf("records after apply: %v", got)
	}
	if got := n.calls(t); !slices.Equal(got, []string{"DEL mine", "DEL old"}) {
		t.Errorf("delegate calls %q, want DEL of mine and old only", got)
	}
	if !strings.Contains(out, "written by host other-machine") || !strings.Contains(out, "WARNING: host(s) other-machine") {
		t.Errorf("the report does not say whose record it kept:\n%s", out)
	}
}

// Issue 41, item 2.5: a file store is this machine's alone, so a record
// written under an older host name (hostnamectl, cloud-init, DHCP, often
// across a reboot) is still this machine's: gc judges it against the
// runtime, and releases it when the runtime does not list it, instead of
// keeping it as "another host's" for ever.
func TestAHostRenameKeepsAFileStoresRecordsItsOwn(t *testing.T) {
	n := newNode(t)
	n.record(t, "running", "eth0", time.Hour)
	n.recordBy(t, "the-old-host-name", "before-rename", "eth0", time.Hour)
	n.recordBy(t, "the-old-host-name", "still-running", "eth0", time.Hour)
	live := n.live(t, []liveness.Running{{ContainerID: "running", IfName: "eth0"}, {ContainerID: "still-running", IfName: "eth0"}})
	code, out, errOut := n.run(t, "--live", live, "--apply")
	if code != admin.ExitOK {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if got := n.left(t); !slices.Equal(got, []string{"running/eth0", "still-running/eth0"}) {
		t.Errorf("records after apply: %v; want the renamed host's gone record released", got)
	}
	if strings.Contains(out, "WARNING") {
		t.Errorf("a file store's records named another host:\n%s", out)
	}
}

// A source that names containers only (the runtime) keeps every
// interface of a listed container.
func TestContainersOnlySourceKeepsEveryInterface(t *testing.T) {
	n := newNode(t)
	n.record(t, "running", "eth0", time.Hour)
	n.record(t, "running", "net1", time.Hour)
	c := newCollector(t, n, liveness.NewView("cri test", "node1", []liveness.Running{{ContainerID: "running"}}))
	plan, _, err := c.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Release) != 0 {
		t.Fatalf("would release %v of a running container", plan.Release)
	}
}

// viewSource answers a fixed view.
type viewSource struct{ view *liveness.View }

func (s viewSource) Read(context.Context) (*liveness.View, error) { return s.view, nil }

func newCollector(t *testing.T, n *node, v *liveness.View) *gc.Collector {
	t.Helper()
	v.ContainersOnly = true
	file, err := cninode.ReadFile(n.conf, n.bin)
	if err != nil {
		t.Fatal(err)
	}
	node, err := gc.OpenReleaser(t.Context(), file, n.bin, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	return &gc.Collector{Node: node, Source: viewSource{view: v}}
}

// safe-ipam gc judges by the GC verb's rules and also keeps a committed
// record younger than gcGracePeriod: the runtime lists a sandbox only
// once RunPodSandbox returns, after its ADD committed. Planning changes
// nothing; applying releases through the delegate as the verb does.
func TestPlanKeepsYoungAndListedThenApplyReleases(t *testing.T) {
	n := newNode(t)
	n.record(t, "listed", "eth0", 2*time.Minute)
	n.record(t, "gone", "eth0", 2*time.Minute)
	n.record(t, "creating", "eth0", time.Second)
	c := newCollector(t, n, liveness.NewView("cri test", "node1", []liveness.Running{{ContainerID: "listed"}}))
	plan, _, err := c.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Release) != 1 || plan.Release[0].ContainerID != "gone" {
		t.Fatalf("plan releases %v, want [gone]", plan.Release)
	}
	why := map[string]string{}
	for _, k := range plan.Keep {
		why[k.Record.ContainerID] = k.Why
	}
	if !strings.Contains(why["listed"], "listed") || !strings.Contains(why["creating"], "gcGracePeriod") {
		t.Fatalf("kept: %v", why)
	}
	if got := n.left(t); len(got) != 3 || n.calls(t) != nil {
		t.Fatalf("planning changed something: records %v, delegate calls %v", got, n.calls(t))
	}
	if err := c.Node.Apply(t.Context(), plan); err != nil {
		t.Fatal(err)
	}
	if got := n.left(t); !slices.Equal(got, []string{"creating/eth0", "listed/eth0"}) {
		t.Errorf("records after apply: %v", got)
	}
	if got := n.calls(t); !slices.Equal(got, []string{"DEL gone"}) {
		t.Errorf("delegate calls %q, want one DEL of gone", got)
	}
}

// Fail closed: every refusal is exit 2 and changes nothing.
func TestRefusals(t *testing.T) {
	n := newNode(t)
	n.record(t, "gone", "eth0", time.Hour)
	empty := n.live(t, nil)
	other := filepath.Join(n.dir, "other.conflist")
	if err := os.WriteFile(other, []byte(`{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"ptp","ipam":{"type":"host-local"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nothing named to collect", nil, "name what to collect"},
		{"runtime not answering", []string{"--cri-endpoint", "unix://" + filepath.Join(n.dir, "absent.sock")}, "CRI runtime"},
		{"empty source while records exist", []string{"--live", empty}, "lists nothing running"},
		{"unreadable cache", []string{"--cni-cache", filepath.Join(n.dir, "absent")}, "CNI result cache"},
		{"two sources", []string{"--live", empty, "--cri-endpoint", "/run/c.sock"}, "give one"},
		{"the pods API", []string{"--kubeconfig", filepath.Join(n.dir, "kubeconfig")}, "not containers"},
		{"IPAM not safe-ipam", []string{"--conf", other, "--live", empty}, "not safe-ipam"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := n.run(t, append(tt.args, "--apply")...)
			if code != admin.ExitError || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, want 2 with %q\n%s%s", code, tt.want, out, errOut)
			}
			if got := n.left(t); len(got) != 1 || n.calls(t) != nil {
				t.Fatalf("a refusal changed something: records %v, delegate calls %v", got, n.calls(t))
			}
		})
	}
}

// The pods API names no containers: every record would look running, so
// gc refuses it instead of reporting everything as kept.
func TestPodsOnlySourceIsRefused(t *testing.T) {
	n := newNode(t)
	n.record(t, "gone", "eth0", time.Hour)
	v := liveness.NewView("pods test", "node1", []liveness.Running{{PodNamespace: "default", PodName: "web-0"}})
	c := newCollector(t, n, v)
	v.ContainersOnly, v.PodsOnly = false, true
	if _, _, err := c.Plan(t.Context()); !errors.Is(err, gc.ErrUntrusted) || !strings.Contains(err.Error(), "not containers") {
		t.Fatalf("plan with a pods-only view: %v; want it refused", err)
	}
}

// After the default install (takeover), the node's conflist is Calico's
// own, with calico-ipam as its IPAM: gc takes it, finding safe-ipam as
// calico-ipam in --cni-bin-dir (issue 19, item 1: it said "not safe-ipam").
func TestGCTakesATakenOverNodesConflist(t *testing.T) {
	etcd := etcdtest.Start(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// safe-ipam in Calico's place, Calico's multi-call binary beside it.
	if err := os.WriteFile(filepath.Join(bin, "calico-ipam"), []byte("#!/bin/sh\n# "+builds.Mark+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "calico"), []byte(delegateScript), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "10-calico.conflist")
	calico := `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico","etcd_endpoints":"` + etcd.Endpoint() +
		`","nodename":"node1","ipam":{"type":"calico-ipam"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	if err := os.WriteFile(conf, []byte(calico), 0o644); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, "live.json")
	if err := os.WriteFile(live, []byte(`[]`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := gc.Run([]string{"--conf", conf, "--cni-bin-dir", bin, "--live", live}, &stdout, &stderr)
	if code != admin.ExitOK || !strings.Contains(stdout.String(), "node1") {
		t.Fatalf("gc on the installed conflist: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
}

// deadNodesWorld is a cluster's etcd with safe-ipam's records of three
// nodes, and node2's conflist (Calico's etcd as the record store).
type deadNodesWorld struct {
	etcd *etcdtest.Server
	dir  string
	bin  string
}

func newDeadNodesWorld(t *testing.T) *deadNodesWorld {
	t.Helper()
	w := &deadNodesWorld{etcd: etcdtest.Start(t), dir: t.TempDir()}
	w.bin = filepath.Join(w.dir, "bin")
	if err := os.MkdirAll(w.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.bin, "calico-ipam"), []byte(delegateScript), 0o755); err != nil {
		t.Fatal(err)
	}
	st := etcdstore.NewWithClient(w.etcd.Client(), config.DefaultEtcdPrefix, "", 5*time.Second)
	for i, node := range []string{"node1", "node2", "node3"} {
		cid := "c" + node[len(node)-1:]
		rec := &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: cid, IfName: "eth0"},
			Node: node, Handle: "k8s-pod-network." + cid, State: record.Committed, IPs: []string{fmt.Sprintf("10.244.0.%d/26", i+1)},
			Created: time.Now().Add(-time.Hour), Updated: time.Now().Add(-time.Hour)}
		if _, err := st.ForNode(node).Commit(context.Background(), nil, rec); err != nil {
			t.Fatal(err)
		}
	}
	// A sweep an hour ago found node1 gone (when Calico forgot it): its
	// records go on this sweep. TestDeadNodesTwoSweeps starts before it.
	if err := st.NoteGone(context.Background(), "k8s-pod-network", "node1", 0); err != nil {
		t.Fatal(err)
	}
	return w
}

// conf writes node2's conflist; calico is the top-level Calico keys.
func (w *deadNodesWorld) conf(t *testing.T, calico string) string {
	t.Helper()
	path := filepath.Join(w.dir, "10-calico.conflist")
	conf := `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico",` + calico + `,"nodename":"node2",
		"ipam":{"type":"safe-ipam","delegate":{"type":"calico-ipam"},"logFile":"","cacheDir":"",
		"store":{"type":"etcd","endpoints":["` + w.etcd.Endpoint() + `"]}}}]}`
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (w *deadNodesWorld) calicoNode(t *testing.T, name string) {
	t.Helper()
	if _, err := w.etcd.Client().Put(context.Background(), calico.NodeKey(name), `{"kind":"Node","metadata":{"name":"`+name+`"},"spec":{}}`); err != nil {
		t.Fatal(err)
	}
}

func (w *deadNodesWorld) records(t *testing.T) []string {
	t.Helper()
	recs, err := etcdstore.NewWithClient(w.etcd.Client(), config.DefaultEtcdPrefix, "", 5*time.Second).ListEveryNode(context.Background(), "k8s-pod-network")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Node+"/"+r.ContainerID)
	}
	slices.Sort(out)
	return out
}

func (w *deadNodesWorld) gc(t *testing.T, conf string, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := gc.Run(append([]string{"--conf", conf, "--cni-bin-dir", w.bin, "--dead-nodes"}, args...), &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

// A node Calico no longer knows (kube-controllers deleted its Node and
// freed its addresses) leaves records that would fence those addresses
// for ever; gc --dead-nodes releases them, and only them (issue 19, item
// 4). While Calico knows the node, its records stay.
func TestDeadNodesReleasesOnlyRecordsOfNodesCalicoForgot(t *testing.T) {
	w := newDeadNodesWorld(t)
	w.calicoNode(t, "node2")
	w.calicoNode(t, "node3")
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	code, out := w.gc(t, conf)
	t.Logf("dry run:\n%s", out)
	if code != admin.ExitAttention || !strings.Contains(out, "1 to release, 1 kept") || !strings.Contains(out, "node node1 is gone") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	if got := calls(t, w.bin); got != nil {
		t.Fatalf("a dry run called the delegate: %v", got)
	}
	if code, out := w.gc(t, conf, "--apply"); code != admin.ExitOK {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	if got := w.records(t); !slices.Equal(got, []string{"node2/c2", "node3/c3"}) {
		t.Errorf("records after apply: %v; want node1's released only", got)
	}
	if got := calls(t, w.bin); !slices.Equal(got, []string{"DEL c1"}) {
		t.Errorf("delegate calls %v; want one DEL of node1's c1", got)
	}
	if index, _ := w.etcd.Dump(etcdstore.AddressPrefix(config.DefaultEtcdPrefix, "")); len(index) != 2 {
		t.Errorf("address index after apply: %v; want node2's and node3's entries", index)
	}
}

// The control: while Calico still knows node1, nothing of it is released.
func TestDeadNodesKeepsRecordsOfKnownNodes(t *testing.T) {
	w := newDeadNodesWorld(t)
	for _, n := range []string{"node1", "node2", "node3"} {
		w.calicoNode(t, n)
	}
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	if code, out := w.gc(t, conf, "--apply"); code != admin.ExitOK || len(w.records(t)) != 3 || calls(t, w.bin) != nil {
		t.Fatalf("exit %d, records %v, calls %v\n%s", code, w.records(t), calls(t, w.bin), out)
	}
}

// Fail closed: a Calico datastore that does not answer is no evidence
// that a node is gone; nothing is released (exit 2).
func TestDeadNodesFailsClosedWithoutCalicosAnswer(t *testing.T) {
	w := newDeadNodesWorld(t)
	kubeconfig := filepath.Join(w.dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: x}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := w.conf(t, `"datastore_type":"kubernetes","kubernetes":{"kubeconfig":"`+kubeconfig+`"}`)
	if code, out := w.gc(t, conf, "--apply"); code != admin.ExitError || len(w.records(t)) != 3 || calls(t, w.bin) != nil {
		t.Fatalf("exit %d, records %v, calls %v\n%s", code, w.records(t), calls(t, w.bin), out)
	}
}

func calls(t *testing.T, bin string) []string {
	return (&node{bin: bin}).calls(t)
}

// The DaemonSet runs gc --every: each run judges the node as it is then,
// a run that fails releases nothing and the loop goes on, and the loop
// ends cleanly with its context (issue 19, item 5).
func TestEveryCollectsOnEachRunAndOutlivesAFailedOne(t *testing.T) {
	n := newNode(t)
	n.record(t, "running", "eth0", time.Hour)
	live := n.live(t, []liveness.Running{{ContainerID: "running", IfName: "eth0"}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var stdout, stderr bytes.Buffer // read only after the loop ended
	addr := freeAddr(t)
	go func() {
		done <- gc.RunContext(ctx, []string{"--conf", n.conf, "--cni-bin-dir", n.bin, "--live", live, "--apply", "--every", "20ms", "--metrics-addr", addr}, &stdout, &stderr)
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("%s: records %v, calls %v\n%s%s", what, n.left(t), n.calls(t), stdout.String(), stderr.String())
			}
		}
	}

	// A sandbox whose DEL never came, after the loop started.
	n.record(t, "gone", "eth0", time.Hour)
	waitFor("a later run releases it", func() bool { return slices.Equal(n.left(t), []string{"running/eth0"}) })
	waitFor("the metrics count it", func() bool {
		return metric(t, addr, "safe_ipam_gc_released_total") == "1" && metric(t, addr, `safe_ipam_gc_rounds_total{result="ok"}`) != ""
	})

	// The source goes away: runs fail and release nothing; then it is back.
	if err := os.Rename(live, live+".away"); err != nil {
		t.Fatal(err)
	}
	n.record(t, "gone-2", "eth0", time.Hour)
	time.Sleep(100 * time.Millisecond)
	if got := n.left(t); !slices.Equal(got, []string{"gone-2/eth0", "running/eth0"}) {
		t.Fatalf("a run without its source released: records %v", got)
	}
	if err := os.Rename(live+".away", live); err != nil {
		t.Fatal(err)
	}
	waitFor("the loop outlived the failed runs", func() bool { return slices.Equal(n.left(t), []string{"running/eth0"}) })
	if metric(t, addr, `safe_ipam_gc_rounds_total{result="error"}`) == "" || metric(t, addr, "safe_ipam_gc_released_total") != "2" {
		t.Errorf("the metrics do not show the failed rounds and both releases:\n%s", scrape(t, addr, "/metrics"))
	}
	if got := scrape(t, addr, "/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q; want ok", got)
	}

	cancel()
	if code := <-done; code != admin.ExitOK {
		t.Fatalf("the loop ended with exit %d; want 0\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "liveness source") {
		t.Errorf("the failed runs were not reported on stderr:\n%s", stderr.String())
	}
	if got := n.calls(t); !slices.Equal(got, []string{"DEL gone", "DEL gone-2"}) {
		t.Errorf("delegate calls %v; want one DEL of each gone sandbox", got)
	}
}

// A liveness source and --dead-nodes in one run (the DaemonSet's):
// this node's records the source does not list, and the records of nodes
// Calico forgot, both go; the rest stays.
func TestDeadNodesWithALivenessSource(t *testing.T) {
	w := newDeadNodesWorld(t)
	w.calicoNode(t, "node2")
	w.calicoNode(t, "node3")
	st := etcdstore.NewWithClient(w.etcd.Client(), config.DefaultEtcdPrefix, "node2", 5*time.Second)
	old := time.Now().Add(-time.Hour)
	gone := &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: "c4", IfName: "eth0"},
		Node: "node2", Handle: "k8s-pod-network.c4", State: record.Committed, IPs: []string{"10.244.0.9/26"}, Created: old, Updated: old}
	if _, err := st.Commit(context.Background(), nil, gone); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(w.dir, "live.json")
	if err := os.WriteFile(live, []byte(`[{"containerID":"c2","ifname":"eth0"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	if code, out := w.gc(t, conf, "--live", live, "--apply"); code != admin.ExitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if got := w.records(t); !slices.Equal(got, []string{"node2/c2", "node3/c3"}) {
		t.Errorf("records %v; want node2's unlisted c4 and dead node1's c1 released", got)
	}
	if got := calls(t, w.bin); !slices.Equal(got, []string{"DEL c1", "DEL c4"}) {
		t.Errorf("delegate calls %v", got)
	}
}

// As kube-controllers does, a node's records go only once two sweeps
// found it gone, the later at least the grace after the first: a node
// missing from one listing loses nothing, and one that comes back is
// forgotten (issue 32).
func TestDeadNodesTwoSweeps(t *testing.T) {
	w := newDeadNodesWorld(t)
	st := etcdstore.NewWithClient(w.etcd.Client(), config.DefaultEtcdPrefix, "", 5*time.Second)
	if err := st.ForgetGone(context.Background(), "k8s-pod-network", "node1"); err != nil {
		t.Fatal(err)
	}
	w.calicoNode(t, "node2")
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	all := []string{"node1/c1", "node2/c2", "node3/c3"}
	// Two of the three nodes gone at once is more than the default share.
	share := "--dead-node-max-share=0.7"
	for i, step := range []struct {
		args   []string
		wait   time.Duration // before the sweep
		known  string        // a node Calico knows again before the sweep
		want   []string
		output string
	}{
		{[]string{"--apply", share, "--dead-node-grace=2s"}, 0, "", all, "found so first now"},
		// The grace is the one noted, by etcd's clock: a later sweep's flag
		// does not shorten it.
		{[]string{"--apply", share, "--dead-node-grace=0s"}, 0, "", all, "a sweep 2s or more after that"},
		{[]string{"--apply", share}, 3 * time.Second, "node3", []string{"node2/c2", "node3/c3"}, "1 to release, 1 kept"},
		{[]string{"--apply", share}, 0, "", []string{"node2/c2", "node3/c3"}, "0 to release, 1 kept"},
	} {
		time.Sleep(step.wait)
		if step.known != "" {
			w.calicoNode(t, step.known)
		}
		code, out := w.gc(t, conf, step.args...)
		if got := w.records(t); code != admin.ExitOK || !slices.Equal(got, step.want) || !strings.Contains(out, step.output) {
			t.Fatalf("sweep %d: exit %d, records %v (want %v)\n%s", i+1, code, got, step.want, out)
		}
	}
	gone, err := st.Sightings(context.Background(), "k8s-pod-network")
	if err != nil || len(gone) != 0 {
		t.Errorf("notes after node1's records went and node3 came back: %v, %v; want none", gone, err)
	}
}

// A dry run writes nothing: no note of a node it finds gone, and no
// note of one that came back is forgotten (issue 32, item 4).
func TestDeadNodesDryRunNotesNothing(t *testing.T) {
	w := newDeadNodesWorld(t)
	st := etcdstore.NewWithClient(w.etcd.Client(), config.DefaultEtcdPrefix, "", 5*time.Second)
	if err := st.ForgetGone(context.Background(), "k8s-pod-network", "node1"); err != nil {
		t.Fatal(err)
	}
	if err := st.NoteGone(context.Background(), "k8s-pod-network", "node3", time.Hour); err != nil {
		t.Fatal(err)
	}
	before, err := st.Sightings(context.Background(), "k8s-pod-network")
	if err != nil {
		t.Fatal(err)
	}
	w.calicoNode(t, "node2")
	w.calicoNode(t, "node3")
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	if code, out := w.gc(t, conf); code != admin.ExitOK || !strings.Contains(out, "found so first now") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	gone, err := st.Sightings(context.Background(), "k8s-pod-network")
	if err != nil || len(gone) != 1 || gone["node3"] != before["node3"] {
		t.Errorf("notes after a dry run: %v, %v; want node3's alone, as before it", gone, err)
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrape GETs path from addr; "" when it does not answer.
func scrape(t *testing.T, addr, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metric is the value of the sample named name (with its labels) in the
// metrics at addr, "" when absent.
func metric(t *testing.T, addr, name string) string {
	t.Helper()
	for _, line := range strings.Split(scrape(t, addr, "/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}
