package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/cachedir"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// binDir holds safe-ipam and safe-ipam-admin side by side, as install
// puts them on a node, built once for the package.
var binDir string

func TestMain(m *testing.M) { gobuild.Main(m, &binDir, ".", "../safe-ipam", "../safe-ipam-etcd") }

// versionOnly stands in for Calico's binary where only its VERSION answer
// matters: doctor asks the delegate for it.
const versionOnly = "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.3.1\",\"1.0.0\"]}'\n"

// calicoNodeDirs is a node with Calico installed from its manifest's
// network config, its etcd the test's own.
func calicoNodeDirs(t *testing.T) (bin, conf string, etcd *etcdtest.Server) {
	t.Helper()
	root := t.TempDir()
	bin, conf = filepath.Join(root, "bin"), filepath.Join(root, "net.d")
	for _, d := range []string{bin, conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	calico := filepath.Join(root, "calico-build")
	if err := os.WriteFile(calico, []byte(versionOnly), 0o755); err != nil {
		t.Fatal(err)
	}
	tpl, err := testbed.CalicoNetworkTemplate()
	if err != nil {
		t.Fatal(err)
	}
	etcd = etcdtest.Start(t)
	network, err := testbed.RenderCalicoNetwork(tpl, testbed.CalicoDefaults(etcd.Endpoint()))
	if err != nil {
		t.Fatal(err)
	}
	if err := (testbed.CalicoInstaller{Binary: calico, BinDir: bin, ConfDir: conf, Network: network}).Run(); err != nil {
		t.Fatal(err)
	}
	// Calico's Node, as calico-node registers it (doctor asks for it).
	name, err := testbed.CalicoNodeName(filepath.Join(conf, "10-calico.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	if err := calicosim.SeedNode(context.Background(), etcd.Client(), name); err != nil {
		t.Fatal(err)
	}
	return bin, conf, etcd
}

// run runs the built binary (or a script) and returns its exit code and
// output.
func run(t *testing.T, name string, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return exitErr.ExitCode(), string(out)
	case err != nil:
		t.Fatal(err)
	}
	return 0, string(out)
}

// scripts/install.sh, as a provisioning script calls it, installs with
// the built binary and ends with doctor saying the node is protected;
// `safe-ipam uninstall` then takes it off.
func TestInstallScriptThenUninstall(t *testing.T) {
	for _, mode := range []string{"takeover", "conflist"} {
		t.Run(mode, func(t *testing.T) {
			bin, conf, _ := calicoNodeDirs(t)
			dirs := []string{"--cni-bin-dir=" + bin, "--cni-conf-dir=" + conf}
			safe := filepath.Join(binDir, "safe-ipam")
			code, out := run(t, "bash", append([]string{"../../scripts/install.sh", "--binary", safe, "--mode=" + mode}, dirs...)...)
			if code != 0 || !strings.Contains(out, "doctor: protected") {
				t.Fatalf("install.sh: exit %d\n%s", code, out)
			}
			if code, out := run(t, safe, append([]string{"uninstall"}, dirs...)...); code != 0 {
				t.Fatalf("uninstall: exit %d\n%s", code, out)
			}
			if code, out := run(t, safe, append([]string{"doctor"}, dirs...)...); code != 1 || !strings.Contains(out, "NOT protected") {
				t.Errorf("doctor after uninstall: exit %d\n%s", code, out)
			}
		})
	}
}

func TestAdminCommandsExitCodes(t *testing.T) {
	bin, conf, _ := calicoNodeDirs(t)
	empty := t.TempDir()
	safe := filepath.Join(binDir, "safe-ipam")
	tests := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"help lists the install commands", []string{"help"}, 0, "safe-ipam doctor"},
		{"install -h", []string{"install", "-h"}, 0, "--watch"},
		{"unknown mode", []string{"install", "--mode=sideways", "--cni-bin-dir=" + bin, "--cni-conf-dir=" + conf}, 2, `--mode "sideways"`},
		{"watch with dry run", []string{"install", "--watch", "--dry-run"}, 2, "exclude each other"},
		{"no Calico", []string{"install", "--cni-bin-dir=" + empty, "--cni-conf-dir=" + empty}, 1, "uses calico-ipam"},
		{"dry run", []string{"install", "--dry-run", "--cni-bin-dir=" + bin, "--cni-conf-dir=" + conf}, 0, "would change"},
		{"doctor before install", []string{"doctor", "--cni-bin-dir=" + bin, "--cni-conf-dir=" + conf}, 1, "NOT protected"},
		{"doctor on a missing dir", []string{"doctor", "--cni-conf-dir=" + filepath.Join(empty, "nope")}, 2, "nope"},
		{"uninstall, nothing installed", []string{"uninstall", "--cni-bin-dir=" + bin, "--cni-conf-dir=" + conf}, 0, "nothing to do"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := run(t, safe, tt.args...)
			if code != tt.code || !strings.Contains(out, tt.says) {
				t.Errorf("safe-ipam %s: exit %d, want %d saying %q\n%s", strings.Join(tt.args, " "), code, tt.code, tt.says, out)
			}
		})
	}
}

// takenOver is a Calico node on which safe-ipam installed itself in
// takeover mode: the safe-ipam binary, the node's directory flags, its
// etcd, and the config install wrote with the node it names.
func takenOver(t *testing.T) (safe string, dirs []string, etcd *etcdtest.Server, cfg *config.Config, node string) {
	t.Helper()
	bin, conf, etcd := calicoNodeDirs(t)
	safe = filepath.Join(binDir, "safe-ipam")
	dirs = []string{"--cni-bin-dir=" + bin, "--cni-conf-dir=" + conf}
	if code, out := run(t, safe, append([]string{"install", "--mode=takeover"}, dirs...)...); code != 0 {
		t.Fatalf("install: exit %d\n%s", code, out)
	}
	file, err := cninode.ReadFile(filepath.Join(conf, "10-calico.conflist"), bin)
	if err != nil || file.SafeIPAM == nil {
		t.Fatalf("the installed conflist is not safe-ipam's: %+v, %v", file, err)
	}
	node, err = file.SafeIPAM.Node()
	if err != nil {
		t.Fatal(err)
	}
	return safe, dirs, etcd, file.SafeIPAM, node
}

// Once uninstalled, no DEL or GC of safe-ipam comes, so uninstall forgets
// this node's records with their address index entries: left behind, a
// record fenced its address for ever after a re-install (issue 19, item
// 3). Calico's allocations are left alone.
func TestUninstallForgetsTheNodesRecords(t *testing.T) {
	safe, dirs, etcd, cfg, node := takenOver(t)
	st := etcdstore.NewWithClient(etcd.Client(), cfg.Store.Prefix, node, 5*time.Second)
	att := record.Attachment{Network: cfg.Network, ContainerID: "gone", IfName: "eth0"}
	rec := &record.Record{Attachment: att, Node: node, Handle: cfg.Network + ".gone", State: record.Committed, IPs: []string{"10.244.0.7/26"}}
	if _, err := st.Commit(context.Background(), nil, rec); err != nil {
		t.Fatal(err)
	}
	calicoKey := "/calico/ipam/v2/handle/" + cfg.Network + ".gone"
	if _, err := etcd.Client().Put(context.Background(), calicoKey, `{"block":{"10.244.0.0/26":1},"deleted":false}`); err != nil {
		t.Fatal(err)
	}
	code, out := run(t, safe, append([]string{"uninstall"}, dirs...)...)
	if code != 0 || !strings.Contains(out, "forgot 1 record(s)") {
		t.Fatalf("uninstall: exit %d\n%s", code, out)
	}
	left, err := etcd.Dump(cfg.Store.Prefix)
	if err != nil || len(left) != 0 {
		t.Errorf("safe-ipam's keys after uninstall: %v (%v)", left, err)
	}
	if calico, err := etcd.Dump(calicoKey); err != nil || len(calico) != 1 {
		t.Errorf("Calico's handle after uninstall: %v (%v); it must stay", calico, err)
	}
}

// An ADD through safe-ipam begun before uninstall put Calico's files
// back is still at work when uninstall lists the records: forgetting its
// pending record made its commit fail, and its pod start with it (seen
// in the three-node rollout and uninstall on KDD). Uninstall waits for
// the call (its lock on the cache dir, which the test holds as the call
// does, until its commit), then forgets the record the ADD committed.
func TestUninstallWaitsForAnADDAtWork(t *testing.T) {
	safe, dirs, etcd, cfg, node := takenOver(t)
	ctx := context.Background()
	callEnds := cachedir.HoldCall(cfg.CacheDir)
	st := etcdstore.NewWithClient(etcd.Client(), cfg.Store.Prefix, node, 5*time.Second)
	att := record.Attachment{Network: cfg.Network, ContainerID: "starting", IfName: "eth0"}
	pending := &record.Record{Attachment: att, Node: node, Host: record.ThisHost(), Handle: cfg.Network + ".starting", State: record.Pending, Created: time.Now().UTC()}
	pending, err := st.Swap(ctx, att, nil, pending)
	if err != nil {
		t.Fatal(err)
	}
	uninstall := exec.Command(safe, append([]string{"uninstall"}, dirs...)...)
	var out strings.Builder
	uninstall.Stdout, uninstall.Stderr = &out, &out
	if err := uninstall.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the delegate's ADD, meanwhile
	committed := *pending
	committed.State, committed.IPs, committed.Updated = record.Committed, []string{"10.244.0.9/26"}, time.Now().UTC()
	if _, err := st.Commit(ctx, pending, &committed); err != nil {
		t.Errorf("the ADD's commit while uninstall runs: %v; want it to succeed (its pod starts)", err)
	}
	callEnds()
	if err := uninstall.Wait(); err != nil || !strings.Contains(out.String(), "forgot 1 record(s)") {
		t.Fatalf("uninstall: %v\n%s", err, out.String())
	}
	if left, err := etcd.Dump(cfg.Store.Prefix); err != nil || len(left) != 0 {
		t.Errorf("safe-ipam's keys after uninstall: %v (%v); the committed record must be forgotten too", left, err)
	}
}

// Records written before the address index existed do not fence their
// addresses; install gives them their entries (each DaemonSet start runs
// it), and says so (issue 19, item 7).
func TestInstallIndexesOldRecords(t *testing.T) {
	safe, dirs, etcd, cfg, node := takenOver(t)
	// As safe-ipam wrote records before fencing: no index entry.
	st := etcdstore.NewWithClient(etcd.Client(), cfg.Store.Prefix, node, 5*time.Second)
	att := record.Attachment{Network: cfg.Network, ContainerID: "old", IfName: "eth0"}
	rec := &record.Record{Attachment: att, Node: node, Handle: cfg.Network + ".old", State: record.Committed, IPs: []string{"10.244.0.7/26"}}
	if _, err := st.Swap(context.Background(), att, nil, rec); err != nil {
		t.Fatal(err)
	}
	index := etcdstore.AddressKey(cfg.Store.Prefix, cfg.Network, "10.244.0.7/26")
	code, out := run(t, safe, append([]string{"install", "--mode=takeover"}, dirs...)...)
	if code != 0 || !strings.Contains(out, "indexed the addresses of 1 record(s)") {
		t.Fatalf("install again: exit %d\n%s", code, out)
	}
	if got, err := etcd.Dump(index); err != nil || len(got) != 1 {
		t.Fatalf("index entry %s after install: %v (%v)", index, got, err)
	}
}

// Review of issue 41: in the etcd store, uninstall leaves the records
// another host wrote under this node's Calico name (a stale nodename:
// that machine's safe-ipam still fences and releases them), and says so;
// --former-host names a host name this machine had before a rename, whose
// records are its own and go too.
func TestUninstallLeavesAnotherHostsRecords(t *testing.T) {
	safe, dirs, etcd, cfg, node := takenOver(t)
	st := etcdstore.NewWithClient(etcd.Client(), cfg.Store.Prefix, node, 5*time.Second)
	for _, w := range []struct{ cid, host string }{{"mine", record.ThisHost()}, {"renamed", "before-a-rename"}, {"theirs", "another-machine"}} {
		att := record.Attachment{Network: cfg.Network, ContainerID: w.cid, IfName: "eth0"}
		rec := &record.Record{Attachment: att, Node: node, Host: w.host, Handle: cfg.Network + "." + w.cid, State: record.Committed}
		if _, err := st.Commit(context.Background(), nil, rec); err != nil {
			t.Fatal(err)
		}
	}
	if code, out := run(t, safe, append([]string{"uninstall", "--dry-run"}, dirs...)...); code != 0 || !strings.Contains(out, "would leave 2 record(s)") {
		t.Fatalf("uninstall --dry-run: exit %d\n%s", code, out)
	}
	code, out := run(t, safe, append([]string{"uninstall", "--former-host", "before-a-rename"}, dirs...)...)
	if code != 0 || !strings.Contains(out, "forgot 2 record(s)") || !strings.Contains(out, "left 1 record(s)") {
		t.Fatalf("uninstall: exit %d\n%s", code, out)
	}
	recs, err := st.List(context.Background(), cfg.Network)
	if err != nil || len(recs) != 1 || recs[0].ContainerID != "theirs" {
		t.Fatalf("records after uninstall: %v (%v); want another machine's alone", recs, err)
	}
}

// Issue 42, item 1: install --delegate-outside-cni-path writes the node's
// leave for a delegate outside CNI_PATH into the node settings, and
// =false takes it back; the plugin reads it from there alone.
func TestInstallWritesTheNodesLeaveForAnOutsideDelegate(t *testing.T) {
	bin, conf, _ := calicoNodeDirs(t)
	safe := filepath.Join(binDir, "safe-ipam")
	dirs := []string{"--cni-bin-dir=" + bin, "--cni-conf-dir=" + conf}
	for _, v := range []string{"--delegate-outside-cni-path", "--delegate-outside-cni-path=false"} {
		if code, out := run(t, safe, append([]string{"install", "--mode=takeover", v}, dirs...)...); code != 0 {
			t.Fatalf("install %s: exit %d\n%s", v, code, out)
		}
		file, err := cninode.ReadFile(filepath.Join(conf, "10-calico.conflist"), bin)
		if err != nil || file.SafeIPAM == nil {
			t.Fatalf("the installed conflist: %+v, %v", file, err)
		}
		if want := !strings.HasSuffix(v, "=false"); file.SafeIPAM.Delegate.OutsideCNIPath != want {
			t.Errorf("after install %s: the plugin reads delegateOutsideCNIPath %v; want %v", v, file.SafeIPAM.Delegate.OutsideCNIPath, want)
		}
	}
}
