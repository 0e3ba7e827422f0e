package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook/rulebooktest"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// calicoScript stands in for Calico's binary where only its VERSION
// answer matters (argv[0] roles are proven in package delegate and e2e).
const calicoScript = `#!/bin/sh
echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}'
`

// node is a Calico node: Calico's rendered network config (its etcd the
// test's own) and its binary as calico and calico-ipam.
type node struct {
	install.Node
	self string
	etcd *etcdtest.Server
}

func newNode(t *testing.T) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{Node: install.Node{BinDir: filepath.Join(root, "bin"), ConfDir: filepath.Join(root, "net.d")}, etcd: etcdtest.Start(t)}
	for _, d := range []string{n.BinDir, n.ConfDir} {
		must(t, os.Mkdir(d, 0o755))
	}
	n.self = filepath.Join(root, "safe-ipam")
	// Each build answers version as the real ones do.
	must(t, os.WriteFile(n.self, []byte("#!/bin/sh\n# "+builds.Mark+"\n[ \"$1\" = version ] && echo 'safe-ipam 9.9.9 (CNI [1.0.0])'\nexit 0\n"), 0o755))
	// The CNI binary's etcd build, which install puts beside it.
	must(t, os.WriteFile(filepath.Join(root, builds.EtcdBinary), []byte("#!/bin/sh\n# etcd build\n# "+builds.Mark+"\n[ \"$1\" = version ] && echo 'safe-ipam-etcd 9.9.9 (CNI [1.0.0])'\nexit 0\n"), 0o755))
	calico := filepath.Join(root, "calico-build")
	must(t, os.WriteFile(calico, []byte(calicoScript), 0o755))
	tpl, err := testbed.CalicoNetworkTemplate()
	must(t, err)
	conf, err := testbed.RenderCalicoNetwork(tpl, testbed.CalicoDefaults(n.etcd.Endpoint()))
	must(t, err)
	must(t, testbed.CalicoInstaller{Binary: calico, BinDir: n.BinDir, ConfDir: n.ConfDir, Network: conf}.Run())
	// Calico's Node, as calico-node registers it: calico-ipam refuses
	// every ADD without it, and doctor asks for it.
	must(t, calicosim.SeedNode(context.Background(), n.etcd.Client(), n.calicoNodeName(t)))
	return n
}

// calicoNodeName is the node name Calico infers from the installed config.
func (n *node) calicoNodeName(t *testing.T) string {
	t.Helper()
	name, err := testbed.CalicoNodeName(filepath.Join(n.ConfDir, "10-calico.conflist"))
	must(t, err)
	return name
}

func (n *node) install(t *testing.T, mode install.Mode) {
	t.Helper()
	if _, err := install.Install(n.Node, mode, n.self, false); err != nil {
		t.Fatal(err)
	}
}

func (n *node) storeRecord(t *testing.T, nodeName string) {
	t.Helper()
	st := etcdstore.NewWithClient(n.etcd.Client(), "/safe-ipam/v1", nodeName, 5*time.Second)
	att := record.Attachment{Network: "k8s-pod-network", ContainerID: "c1", IfName: "eth0"}
	rec := &record.Record{Attachment: att, Node: nodeName, State: record.Committed, Created: time.Now(), Updated: time.Now()}
	if _, err := st.Swap(context.Background(), att, nil, rec); err != nil {
		t.Fatal(err)
	}
}

// recordPodNameKeyed allocates an address in Calico's data under
// handle, and records it as safe-ipam's container mode does for pod
// default/web-0, container c1.
func (n *node) recordPodNameKeyed(t *testing.T, handle string) {
	t.Helper()
	ctx := context.Background()
	must(t, calicosim.SeedIPPool(ctx, n.etcd.Client(), "default-ipv4-ippool", "10.244.0.0/16", 26))
	addr, err := calicosim.SeedLegacyHandle(ctx, n.etcd.Client(), n.calicoNodeName(t), handle)
	must(t, err)
	st := etcdstore.NewWithClient(n.etcd.Client(), "/safe-ipam/v1", n.calicoNodeName(t), 5*time.Second)
	att := record.Attachment{Network: "k8s-pod-network", ContainerID: "c1", IfName: "eth0"}
	rec := &record.Record{Attachment: att, Node: n.calicoNodeName(t), State: record.Committed, Handle: "k8s-pod-network.c1",
		PodNamespace: "default", PodName: "web-0", IPs: []string{addr.String() + "/26"}, Created: time.Now(), Updated: time.Now()}
	if _, err := st.Swap(ctx, att, nil, rec); err != nil {
		t.Fatal(err)
	}
}

func TestDoctor(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(t *testing.T, n *node)
		wantExit   int
		wantIPAM   string
		wantBinary string
		wantInOut  string
	}{
		{"Calico alone", func(*testing.T, *node) {}, ExitNotProtected, "calico-ipam (calico)", BinaryCalico, "NOT protected: not installed"},
		{"takeover", func(t *testing.T, n *node) { n.install(t, install.TakeoverMode{}) }, ExitProtected,
			"calico-ipam = safe-ipam -> calico as calico-ipam", BinarySafeIPAM, "doctor: protected"},
		{"conflist", func(t *testing.T, n *node) { n.install(t, install.ConflistMode{}) }, ExitProtected,
			"safe-ipam = safe-ipam -> calico-ipam", BinaryCalico, "doctor: protected"},
		{"takeover, Calico's binary gone", func(t *testing.T, n *node) {
			n.install(t, install.TakeoverMode{})
			must(t, os.Remove(filepath.Join(n.BinDir, "calico")))
		}, ExitBroken, "calico-ipam = safe-ipam -> calico as calico-ipam", BinarySafeIPAM, "delegate binary not found"},
		// Issue 22: installed but broken is neither "protected" nor "not
		// installed", and the line says why.
		{"takeover, etcd_endpoints misspelled", func(t *testing.T, n *node) {
			n.install(t, install.TakeoverMode{})
			path := filepath.Join(n.ConfDir, "10-calico.conflist")
			b, err := os.ReadFile(path)
			must(t, err)
			must(t, os.WriteFile(path, bytes.Replace(b, []byte(`"etcd_endpoints"`), []byte(`"etcd_endpoint"`), 1), 0o600))
		}, ExitBroken, "calico-ipam = safe-ipam -> calico as calico-ipam", BinarySafeIPAM, `"etcd_endpoint" is not a key Calico reads ("etcd_endpoints"?)`},
		{"takeover, Calico's etcd stopped", func(t *testing.T, n *node) {
			n.install(t, install.TakeoverMode{})
			n.etcd.Close()
		}, ExitBroken, "calico-ipam = safe-ipam -> calico as calico-ipam", BinarySafeIPAM, "installed but broken"},
		{"takeover, no Calico Node", func(t *testing.T, n *node) {
			n.install(t, install.TakeoverMode{})
			_, err := n.etcd.Client().Delete(context.Background(), calico.NodeKey(n.calicoNodeName(t)))
			must(t, err)
		}, ExitBroken, "calico-ipam = safe-ipam -> calico as calico-ipam", BinarySafeIPAM, "has no Node"},
		// Issue 22: container mode in front of a calico-ipam that keys ADD
		// by namespace.podname leaks every address; doctor said protected.
		{"takeover, container mode, calico-ipam keys by pod name", func(t *testing.T, n *node) {
			n.install(t, install.TakeoverMode{})
			n.recordPodNameKeyed(t, "default.web-0")
		}, ExitBroken, "calico-ipam = safe-ipam -> calico as calico-ipam", BinarySafeIPAM, `calico-ipam keyed 1 of this node's 1 latest records by namespace.podname`},
		{"takeover, container mode, calico-ipam keys by container", func(t *testing.T, n *node) {
			n.install(t, install.TakeoverMode{})
			n.recordPodNameKeyed(t, "k8s-pod-network.c1")
		}, ExitProtected, "calico-ipam = safe-ipam -> calico as calico-ipam", BinarySafeIPAM, "doctor: protected"},
		// Issue 30: a config that names safe-ipam without its binary
		// fails every pod start; doctor said "not installed" (exit 1).
		{"conflist, safe-ipam's binary gone", func(t *testing.T, n *node) {
			n.install(t, install.ConflistMode{})
			must(t, os.Remove(filepath.Join(n.BinDir, "safe-ipam")))
		}, ExitBroken, "safe-ipam (missing)", BinaryCalico, "every pod start fails"},
		{"calico-node restarted after takeover", func(t *testing.T, n *node) {
			n.install(t, install.TakeoverMode{})
			b, err := os.ReadFile(filepath.Join(n.BinDir, "calico"))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(n.BinDir, "calico-ipam"), b, 0o755))
		}, ExitNotProtected, "calico-ipam (calico)", BinaryCalico, "NOT protected: not installed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			tt.setup(t, n)
			before := snapshot(t, n.Node)
			var out, errOut bytes.Buffer
			code := Run([]string{"--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir}, &out, &errOut)
			t.Logf("doctor:\n%s%s", out.String(), errOut.String())
			if code != tt.wantExit || !strings.Contains(out.String(), tt.wantInOut) {
				t.Errorf("exit %d, want %d with %q in the output", code, tt.wantExit, tt.wantInOut)
			}
			var r Report
			out.Reset()
			Run([]string{"--json", "--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir}, &out, &errOut)
			must(t, json.Unmarshal(out.Bytes(), &r))
			if len(r.Networks) != 1 || r.Networks[0].IPAM != tt.wantIPAM || r.CalicoIPAM != tt.wantBinary {
				t.Fatalf("report %s; want one network whose IPAM is %q, calico-ipam %s", out.String(), tt.wantIPAM, tt.wantBinary)
			}
			if r.Protected != (tt.wantExit == ExitProtected) {
				t.Errorf("protected %v, exit %d", r.Protected, tt.wantExit)
			}
			if before != snapshot(t, n.Node) {
				t.Error("doctor changed the node's dirs")
			}
		})
	}
}

// Issue 46: with safe-ipam's own config sorting first, the runtime reads
// it and not Calico's, which doctor lists as not read; without safe-ipam's
// binary every pod start fails (broken); with a Calico config sorting
// before safe-ipam's, that one runs, unprotected (broken: installed, and
// not in front).
func TestDoctorOwnConflist(t *testing.T) {
	for _, tt := range []struct {
		name     string
		after    func(t *testing.T, n *node)
		wantExit int
		want     string
	}{
		{"installed", func(*testing.T, *node) {}, ExitProtected, "doctor: protected"},
		{"safe-ipam's binary gone", func(t *testing.T, n *node) {
			must(t, os.Remove(filepath.Join(n.BinDir, builds.CNIBinary)))
		}, ExitBroken, "every pod start fails"},
		{"a Calico config sorting first", func(t *testing.T, n *node) {
			b, err := os.ReadFile(filepath.Join(n.ConfDir, "10-calico.conflist"))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(n.ConfDir, "00-calico.conflist"), b, 0o600))
		}, ExitBroken, "00-calico.conflist (plugin 0): its IPAM does not go through safe-ipam"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			n.install(t, install.OwnConflistMode{})
			tt.after(t, n)
			var out, errOut bytes.Buffer
			code := Run([]string{"--json", "--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir}, &out, &errOut)
			var r Report
			must(t, json.Unmarshal(out.Bytes(), &r))
			var text bytes.Buffer
			Run([]string{"--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir}, &text, &errOut)
			t.Logf("doctor:\n%s%s", text.String(), errOut.String())
			if code != tt.wantExit || !strings.Contains(text.String(), tt.want) {
				t.Errorf("exit %d, want %d with %q in the output", code, tt.wantExit, tt.want)
			}
			if tt.wantExit != ExitProtected {
				return
			}
			own, calico := filepath.Join(n.ConfDir, cninode.OwnConflist), filepath.Join(n.ConfDir, "10-calico.conflist")
			if len(r.Networks) != 2 || r.Networks[0].File != own || !r.Networks[0].Installed || r.Networks[1].File != calico || r.Networks[1].ShadowedBy != own {
				t.Errorf("networks %+v; want %s through safe-ipam, then %s not read", r.Networks, own, calico)
			}
		})
	}
}

// Protected, doctor names the delegate it reached, the CNI version it
// speaks, the records of this node and Calico's datastore and node.
func TestDoctorReportsDelegateStoreAndNode(t *testing.T) {
	n := newNode(t)
	n.install(t, install.TakeoverMode{})
	r, err := Check(context.Background(), n.Node.Dirs(), nil)
	must(t, err)
	if !r.Protected || len(r.Networks) != 1 {
		t.Fatalf("not protected: %+v", r)
	}
	net := r.Networks[0]
	n.storeRecord(t, net.Node)
	n.storeRecord(t, "another-node")
	r, err = Check(context.Background(), n.Node.Dirs(), nil)
	must(t, err)
	net = r.Networks[0]
	d, s := net.Delegate, net.Store
	if d.Path != filepath.Join(n.BinDir, "calico") || d.Argv0 != filepath.Join(n.BinDir, "calico-ipam") || d.Speaks != "1.0.0" {
		t.Errorf("delegate %+v; want Calico's calico run as calico-ipam at 1.0.0", d)
	}
	if s.Type != "etcd" || !s.Answers || s.Records != 1 {
		t.Errorf("store %+v; want Calico's etcd answering with this node's one record", s)
	}
	if net.Datastore != "etcdv3" || net.Node == "" {
		t.Errorf("datastore %q node %q; want etcdv3 (Calico infers it from etcd_endpoints) and a node", net.Datastore, net.Node)
	}
	// Issue 44, item 7: the report names the build the runtime runs: on
	// a node whose records are in etcd, the etcd build.
	if r.Build != "safe-ipam-etcd 9.9.9" {
		t.Errorf("build %q (%s); want the etcd build's name and version", r.Build, r.BuildError)
	}
	// Issue 20, finding 8: the test's etcd is plain http; protected still,
	// with a warning that names the endpoint.
	var out bytes.Buffer
	r.WriteTable(&out)
	if !strings.Contains(out.String(), "the runtime runs: safe-ipam-etcd 9.9.9\n") {
		t.Errorf("table:\n%s\nwant the build the runtime runs", out.String())
	}
	if !strings.Contains(s.Exposure, n.etcd.Endpoint()) || !strings.Contains(out.String(), "warning: record store of "+net.Network+": etcd endpoint(s) "+n.etcd.Endpoint()) {
		t.Errorf("exposure %q, table:\n%s\nwant a warning naming the plain-text endpoint", s.Exposure, out.String())
	}
	// Issue 33, finding 7: per transport, Calico's etcd too.
	if c := net.Calico; c == nil || c.Transport != "Calico's etcd" || !strings.Contains(c.Exposure, n.etcd.Endpoint()) ||
		!strings.Contains(out.String(), "warning: Calico's datastore of "+net.Network+" (Calico's etcd): etcd endpoint(s) "+n.etcd.Endpoint()) {
		t.Errorf("Calico %+v, table:\n%s\nwant a warning for Calico's etcd naming the plain-text endpoint", net.Calico, out.String())
	}
}

func TestDoctorBadInput(t *testing.T) {
	n := newNode(t)
	must(t, os.WriteFile(filepath.Join(n.ConfDir, "05-broken.conflist"), []byte(`{"plugins": [`), 0o644))
	var out, errOut bytes.Buffer
	if code := Run([]string{"--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir}, &out, &errOut); code != ExitNotProtected ||
		!strings.Contains(out.String(), "05-broken.conflist does not parse") {
		t.Errorf("a broken config: exit %d\n%s", code, out.String())
	}
	if code := Run([]string{"--cni-conf-dir", filepath.Join(n.ConfDir, "nope")}, &out, &errOut); code != ExitError {
		t.Errorf("a missing conf dir: exit %d, want %d", code, ExitError)
	}
	if code := Run([]string{"--bogus"}, &out, &errOut); code != ExitError {
		t.Errorf("an unknown flag: exit %d, want %d", code, ExitError)
	}
}

func snapshot(t *testing.T, n install.Node) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range []string{n.BinDir, n.ConfDir} {
		entries, err := os.ReadDir(dir)
		must(t, err)
		for _, e := range entries {
			st, err := os.Stat(filepath.Join(dir, e.Name()))
			must(t, err)
			c, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			b.WriteString(e.Name() + st.Mode().String() + st.ModTime().String() + string(c) + "\n")
		}
	}
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// doctor counts this node's records, the quarantines tied to them and,
// given a liveness source, the stale records gc would release; a source
// that cannot judge is said so, never taken for "nothing runs" (issue
// 19, item 5).
func TestDoctorCountsStaleRecordsAndQuarantines(t *testing.T) {
	n := newNode(t)
	n.install(t, install.TakeoverMode{})
	r, err := Check(context.Background(), n.Node.Dirs(), nil)
	must(t, err)
	node := r.Networks[0].Node
	ctx := context.Background()
	st := etcdstore.NewWithClient(n.etcd.Client(), "/safe-ipam/v1", node, 5*time.Second)
	old := time.Now().Add(-time.Hour)
	commit := func(cid, ip string) *record.Record {
		rec := &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: cid, IfName: "eth0"}, Node: node,
			Handle: "k8s-pod-network." + cid, State: record.Committed, IPs: []string{ip}, Created: old, Updated: old}
		got, err := st.Commit(ctx, nil, rec)
		must(t, err)
		return got
	}
	holder := commit("running", "10.244.0.1/26")
	commit("gone", "10.244.0.2/26")
	fenced := record.Attachment{Network: "k8s-pod-network", ContainerID: "fenced", IfName: "eth0"}
	pending, err := st.Swap(ctx, fenced, nil, &record.Record{Attachment: fenced, Node: node, State: record.Pending, Created: old, Updated: old})
	must(t, err)
	must(t, st.Quarantine(ctx, pending, holder, record.Quarantine{Attachment: fenced, IPs: holder.IPs}))

	live := filepath.Join(t.TempDir(), "live.json")
	tests := []struct {
		name, listed string // listed: the --live file, "" for no source
		stale        int
		staleBy      bool
		staleError   string
		// The records were written an hour ago: a stale one gc has not
		// released in that time makes the node broken (issue 22).
		exit int
	}{
		{name: "no liveness source", exit: ExitProtected},
		{name: "the runtime lists one of two", listed: `[{"containerID":"running","ifname":"eth0"}]`, stale: 1, staleBy: true, exit: ExitBroken},
		{name: "a source that lists nothing", listed: `[]`, staleBy: true, staleError: "lists nothing running", exit: ExitProtected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"--json", "--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir}
			if tt.listed != "" {
				must(t, os.WriteFile(live, []byte(tt.listed), 0o644))
				args = append(args, "--live", live)
			}
			var out, errOut bytes.Buffer
			if code := Run(args, &out, &errOut); code != tt.exit {
				t.Fatalf("exit %d; want %d\n%s%s", code, tt.exit, out.String(), errOut.String())
			}
			var r Report
			must(t, json.Unmarshal(out.Bytes(), &r))
			s := r.Networks[0].Store
			if s.Records != 2 || s.Quarantines != 1 || s.Stale != tt.stale || (s.StaleBy != "") != tt.staleBy || !strings.Contains(s.StaleError, tt.staleError) {
				t.Errorf("store %+v; want 2 records, 1 quarantine, %d stale, judged %v, error %q", s, tt.stale, tt.staleBy, tt.staleError)
			}
			out.Reset()
			Run(args[1:], &out, &errOut)
			t.Logf("doctor:\n%s", out.String())
		})
	}
	// A stale record younger than StaleOverdue is the next gc run's work:
	// still protected.
	young := time.Now().Add(-5 * time.Minute)
	_, err = st.Commit(ctx, nil, &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: "young", IfName: "eth0"}, Node: node,
		Handle: "k8s-pod-network.young", State: record.Committed, IPs: []string{"10.244.0.3/26"}, Created: young, Updated: young})
	must(t, err)
	must(t, os.WriteFile(live, []byte(`[{"containerID":"running","ifname":"eth0"},{"containerID":"gone","ifname":"eth0"}]`), 0o644))
	var out, errOut bytes.Buffer
	if code := Run([]string{"--json", "--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir, "--live", live}, &out, &errOut); code != ExitProtected {
		t.Errorf("a stale record 5 minutes old: exit %d; want protected\n%s%s", code, out.String(), errOut.String())
	}
	var rep Report
	must(t, json.Unmarshal(out.Bytes(), &rep))
	if s := rep.Networks[0].Store; s.Stale != 1 || s.Overdue != 0 {
		t.Errorf("store %+v; want 1 stale, none overdue", s)
	}
}

// Only a key Calico does not read, close to one of its datastore or node
// keys, is taken for a misspelling: Calico's own configs pass.
func TestMisspelledCalicoKeys(t *testing.T) {
	tests := []struct {
		conf string
		want int
	}{
		{`{"type":"calico","etcd_endpoints":"https://a:2379","nodename":"n","mtu":1440,"policy":{"type":"k8s"},"log_file_max_size":100}`, 0},
		{`{"type":"calico","etcd_endpoint":"https://a:2379"}`, 1},
		{`{"type":"calico","datastore-type":"etcdv3","etcd_endpoints":"x"}`, 1},
		{`{"type":"calico","etcd_endpoint":"x","etcd_endpoints":"x"}`, 0}, // both: Calico reads the right one
		{`{"type":"calico","my_setting":"x"}`, 0},
	}
	for _, tt := range tests {
		if got := misspelledCalicoKeys([]byte(tt.conf)); len(got) != tt.want {
			t.Errorf("misspelledCalicoKeys(%s) = %v; want %d", tt.conf, got, tt.want)
		}
	}
}

// The watch's local check asks no store or datastore: with etcd paused
// it still finds the node protected, where the full check finds the store
// and datastore unanswered, which is no verdict on the node (issue 32).
func TestCheckLocalAsksNoOne(t *testing.T) {
	n := newNode(t)
	n.install(t, install.TakeoverMode{})
	n.etcd.Pause()
	defer func() { must(t, n.etcd.Resume()) }()
	r, err := CheckLocal(context.Background(), n.Node.Dirs())
	must(t, err)
	if !r.Protected || r.Unanswered() || len(r.Networks) != 1 || r.Networks[0].Store != nil || r.Networks[0].Calico != nil {
		t.Errorf("local check with etcd paused: %+v; want protected, nothing asked", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r, err = Check(ctx, n.Node.Dirs(), nil)
	must(t, err)
	if r.Protected || !r.Unanswered() {
		t.Errorf("full check with etcd paused: %+v; want not protected, unanswered", r)
	}
}

// Two machines under one Calico node name (a stale nodename) write
// records under it: doctor warns, naming the other host, and does not
// count that host's records as stale, as gc keeps them (issue 34).
func TestDoctorWarnsOfAnotherHostsRecords(t *testing.T) {
	n := newNode(t)
	n.install(t, install.TakeoverMode{})
	r, err := Check(context.Background(), n.Node.Dirs(), nil)
	must(t, err)
	node := r.Networks[0].Node
	st := etcdstore.NewWithClient(n.etcd.Client(), "/safe-ipam/v1", node, 5*time.Second)
	old := time.Now().Add(-time.Hour)
	for _, w := range []struct{ cid, host, ip string }{{"running", record.ThisHost(), "10.244.0.1/26"}, {"theirs", "other-machine", "10.244.0.2/26"}} {
		_, err := st.Commit(context.Background(), nil, &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: w.cid, IfName: "eth0"},
			Node: node, Host: w.host, Handle: "k8s-pod-network." + w.cid, State: record.Committed, IPs: []string{w.ip}, Created: old, Updated: old})
		must(t, err)
	}
	live := filepath.Join(t.TempDir(), "live.json")
	must(t, os.WriteFile(live, []byte(`[{"containerID":"running","ifname":"eth0"}]`), 0o644))
	args := []string{"--json", "--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir, "--live", live}
	var out, errOut bytes.Buffer
	if code := Run(args, &out, &errOut); code != ExitProtected {
		t.Fatalf("exit %d; want protected\n%s%s", code, out.String(), errOut.String())
	}
	var rep Report
	must(t, json.Unmarshal(out.Bytes(), &rep))
	if s := rep.Networks[0].Store; s.Stale != 0 || !slices.Equal(s.OtherHosts, []string{"other-machine"}) {
		t.Errorf("store %+v; want none stale, other host other-machine", s)
	}
	out.Reset()
	Run(args[1:], &out, &errOut)
	if !strings.Contains(out.String(), "warning: records of k8s-pod-network on node "+node+" were written by this host and by other-machine") {
		t.Errorf("no warning naming the other host:\n%s", out.String())
	}
}

// Issue 41, item 1: the rulebook's rows through doctor's stale count (a
// liveness source, which lags, over the etcd store): it counts exactly
// the records the rulebook lets go.
func TestDoctorAnswersTheRulebooksRows(t *testing.T) {
	n := newNode(t)
	n.install(t, install.TakeoverMode{})
	node := n.calicoNodeName(t)
	st := etcdstore.NewWithClient(n.etcd.Client(), "/safe-ipam/v1", node, 5*time.Second)
	live := []liveness.Running{{ContainerID: "other", IfName: "eth0"}}
	want, records := 0, 0
	for i, row := range rulebooktest.Rows {
		if !row.For(true, true) {
			continue
		}
		cid := fmt.Sprintf("row%d", i)
		rec := row.Record(node, cid, i, time.Now())
		rec.Network, rec.Handle = "k8s-pod-network", "k8s-pod-network."+cid
		_, err := st.Swap(context.Background(), rec.Attachment, nil, rec)
		must(t, err)
		if row.Listed {
			live = append(live, liveness.Running{ContainerID: cid, IfName: "eth0"})
		}
		if records++; row.Release {
			want++
		}
	}
	path := filepath.Join(t.TempDir(), "live.json")
	data, err := json.Marshal(live)
	must(t, err)
	must(t, os.WriteFile(path, data, 0o644))
	var out, errOut bytes.Buffer
	Run([]string{"--json", "--cni-bin-dir", n.BinDir, "--cni-conf-dir", n.ConfDir, "--live", path}, &out, &errOut)
	var r Report
	must(t, json.Unmarshal(out.Bytes(), &r))
	if s := r.Networks[0].Store; s.Records != records || s.Stale != want {
		t.Errorf("store %+v; want %d records, %d stale (the rows the rulebook releases)\n%s", s, records, want, errOut.String())
	}
}
