package install

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// Issue 46: calico-node's installer writes its binaries and its config at
// every start. In own-conflist mode that undoes nothing: all the while,
// the first config the runtime reads routes through safe-ipam, whose
// binary is in place, and the watch renders safe-ipam's config again from
// each new Calico config (here a new MTU each time).
func TestOwnConflistNoWindowAtCalicoRestarts(t *testing.T) {
	const restarts = 10
	f := newFixture(t)
	got := startWatch(t, f, OwnConflistMode{}, 0)
	var samples, unguarded atomic.Int64
	var first atomic.Value
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			samples.Add(1)
			if why := firstConfUnguarded(f.node); why != "" {
				unguarded.Add(1)
				first.CompareAndSwap(nil, why)
			}
		}
	}()
	for i := range restarts {
		version := "v" + strconv.Itoa(i+2)
		f.installer.Binary = writeFile(t, f.node.BinDir+"/../calico-"+version, "Calico's multi-call binary, "+version+"\n", 0o755)
		f.installer.Network = render(t, f.template, strconv.Itoa(1400-i))
		must(t, f.installer.Run())
		if err := waitProtected(t, f, got); err != nil {
			t.Fatalf("after restart %d: %v", i+1, err)
		}
	}
	close(stop)
	<-done
	t.Logf("%d calico-node restarts: %d of %d samples of the conf dir found the runtime's first config unguarded", restarts, unguarded.Load(), samples.Load())
	if unguarded.Load() > 0 || samples.Load() == 0 {
		t.Errorf("%d of %d samples unguarded, the first: %v", unguarded.Load(), samples.Load(), first.Load())
	}
}

// waitProtected waits for the watch to render safe-ipam's config from
// Calico's current one.
func waitProtected(t *testing.T, f *fixture, got <-chan Reassertion) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ownConflistProtected(t, f) != nil && time.Now().Before(deadline) {
		select {
		case <-got:
		case <-time.After(20 * time.Millisecond):
		}
	}
	return ownConflistProtected(t, f)
}

// firstConfUnguarded says why the runtime's first config would reach
// calico-ipam alone, "" when it goes through safe-ipam.
func firstConfUnguarded(n Node) string {
	confs, err := cninode.ReadConfs(n.ConfDir)
	if err != nil || len(confs) == 0 {
		return "no config to read"
	}
	c := confs[0]
	if c.Err != nil || !namesSafeIPAM(c) {
		return c.Path + " is the first config, and names no safe-ipam"
	}
	if ok, err := cninode.IsSafeIPAM(n.bin(builds.CNIBinary)); !ok || err != nil {
		return "bin/safe-ipam is not safe-ipam"
	}
	return ""
}

// Once Calico's config goes, safe-ipam's goes too: it would configure a
// network Calico no longer runs. Uninstall then takes the rest off.
func TestOwnConflistGoesWithCalicos(t *testing.T) {
	f := newFixture(t)
	if _, err := Install(f.node, OwnConflistMode{}, f.self, false); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(f.node.conf("10-calico.conflist")))
	r, err := Install(f.node, OwnConflistMode{}, f.self, false)
	if err != nil || !r.Applied {
		t.Fatalf("install once Calico's config went: %+v, %v", r, err)
	}
	for _, path := range []string{f.node.conf(cninode.OwnConflist), absentPath(f.node.conf(cninode.OwnConflist))} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left (%v)", path, err)
		}
	}
	if _, err := Install(f.node, OwnConflistMode{}, f.self, false); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "no network config in") {
		t.Fatalf("install on a node without Calico: %v; want a refusal", err)
	}
	if _, err := Uninstall(f.node, OwnConflistMode{}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Uninstall(f.node, ConflistMode{}, false); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{builds.CNIBinary, builds.EtcdBinary} {
		if _, err := os.Stat(f.node.bin(name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("bin/%s is left after uninstall (%v)", name, err)
		}
	}
}

// Where safe-ipam's config would not be the one the runtime reads in
// Calico's place, own-conflist mode refuses, changing nothing.
func TestOwnConflistRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, f *fixture)
		want  string
	}{
		{"another network sorts first", func(t *testing.T, f *fixture) {
			writeFile(t, f.node.conf("05-other.conflist"), `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}`, 0o644)
		}, "05-other.conflist first"},
		{"Calico's config sorts before safe-ipam's", func(t *testing.T, f *fixture) {
			must(t, os.Rename(f.node.conf("10-calico.conflist"), f.node.conf("00-calico.conflist")))
		}, "00-calico.conflist sorts before"},
		{"conflist mode installed", func(t *testing.T, f *fixture) {
			if _, err := Install(f.node, ConflistMode{}, f.self, false); err != nil {
				t.Fatal(err)
			}
		}, "conflist mode"},
		{"another file under safe-ipam's name", func(t *testing.T, f *fixture) {
			writeFile(t, f.node.conf(cninode.OwnConflist), `{"cniVersion":"1.0.0","name":"mine","plugins":[{"type":"bridge"}]}`, 0o644)
		}, "not a network config safe-ipam wrote"},
		{"takeover mode installed, by a watch", func(t *testing.T, f *fixture) {
			if _, err := Install(f.node, TakeoverMode{}, f.self, false); err != nil {
				t.Fatal(err)
			}
		}, "takeover mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(t, f)
			before := f.snapshot(t)
			_, err := Install(f.node, OwnConflistMode{}, f.self, false)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("install: %v; want a refusal saying %q", err, tc.want)
			}
			assertSame(t, "after a refused install", f.snapshot(t), before)
		})
	}
}

// On a node in own-conflist mode the other modes' installs refuse, and
// say how to switch; uninstall without --mode takes safe-ipam's config
// off before the binary it names, back to Calico's files byte for byte.
func TestOwnConflistSwitchesAndUninstallOrder(t *testing.T) {
	f := newFixture(t)
	calico := f.snapshot(t)
	if _, err := Install(f.node, TakeoverMode{}, f.self, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(f.node, OwnConflistMode{SwitchFromTakeover: true}, f.self, false); err != nil {
		t.Fatalf("switch from takeover: %v", err)
	}
	if err := ownConflistProtected(t, f); err != nil {
		t.Fatal(err)
	}
	installed := f.snapshot(t)
	for _, m := range []Mode{ConflistMode{SwitchFromTakeover: true}, TakeoverMode{}} {
		if _, err := Install(f.node, m, f.self, false); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "install --mode="+m.Name()) {
			t.Fatalf("%s install on an own-conflist node: %v; want a refusal saying how to switch", m.Name(), err)
		}
	}
	if _, err := Uninstall(f.node, ConflistMode{}, false); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "without --mode") {
		t.Fatalf("conflist uninstall would take the binary safe-ipam's config names: %v; want a refusal", err)
	}
	assertSame(t, "after refusals", f.snapshot(t), installed)
	r, err := Uninstall(f.node, OwnConflistMode{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Plan.Steps; len(s) == 0 || s[0].Path != f.node.conf(cninode.OwnConflist) || !s[0].remove {
		t.Fatalf("uninstall's plan %v; want safe-ipam's config removed first", r.Plan.Describe())
	}
	for _, name := range ModeNames[1:] {
		m, err := ModeNamed(name)
		must(t, err)
		if _, err := Uninstall(f.node, m, false); err != nil {
			t.Fatalf("%s uninstall: %v", name, err)
		}
	}
	assertSame(t, "after uninstall", f.snapshot(t), calico)
}

// The watch re-renders within the settle time; a burst of writes ends
// with the last one rendered.
func TestOwnConflistWatchRendersTheLastWrite(t *testing.T) {
	f := newFixture(t)
	got := startWatch(t, f, OwnConflistMode{}, 20*time.Millisecond)
	for _, mtu := range []string{"1300", "1310", "1320"} {
		f.installer.Network = render(t, f.template, mtu)
		must(t, f.installer.Run())
	}
	if err := waitProtected(t, f, got); err != nil {
		t.Fatal(err)
	}
}

// Once safe-ipam's config no longer stands in Calico's place (here a new
// CNI's config sorts between the two), the next install, the watch's,
// takes it off, so the runtime reads what it would without safe-ipam;
// then it refuses, saying why.
func TestOwnConflistGoesWhenItNoLongerApplies(t *testing.T) {
	f := newFixture(t)
	if _, err := Install(f.node, OwnConflistMode{}, f.self, false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, f.node.conf("05-cilium.conflist"), `{"cniVersion":"1.0.0","name":"cilium","plugins":[{"type":"cilium-cni"}]}`, 0o644)
	r, err := Install(f.node, OwnConflistMode{}, f.self, false)
	if err != nil || !r.Applied {
		t.Fatalf("install once another config sorts before Calico's: %+v, %v", r, err)
	}
	confs, err := cninode.ReadConfs(f.node.ConfDir)
	must(t, err)
	if confs[0].Path != f.node.conf("05-cilium.conflist") {
		t.Fatalf("the runtime reads %s first; want the new CNI's", confs[0].Path)
	}
	if _, err := Install(f.node, OwnConflistMode{}, f.self, false); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "05-cilium.conflist first") {
		t.Fatalf("install again: %v; want a refusal naming the config read first", err)
	}
}

// Uninstall takes off a safe-ipam config that no longer reads (it sorts
// first: kept, it would fail every pod start without safe-ipam's binary),
// and waits Node.ReloadWait between the config and the binary.
func TestOwnConflistUninstallRemovesABrokenConfigAndWaits(t *testing.T) {
	f := newFixture(t)
	calico := f.snapshot(t)
	if _, err := Install(f.node, OwnConflistMode{}, f.self, false); err != nil {
		t.Fatal(err)
	}
	writeFile(t, f.node.conf(cninode.OwnConflist), `{"cniVersion":"1.0.0","name":`, 0o600)
	f.node.ReloadWait = 50 * time.Millisecond
	r, err := Uninstall(f.node, OwnConflistMode{}, false)
	if err != nil {
		t.Fatal(err)
	}
	own, waited, binary := -1, -1, -1
	for i, s := range r.Plan.Steps {
		switch {
		case s.Path == f.node.conf(cninode.OwnConflist) && s.remove:
			own = i
		case s.pause == f.node.ReloadWait:
			waited = i
		case s.Path == f.node.bin(builds.CNIBinary) && s.remove:
			binary = i
		}
	}
	if own < 0 || waited < own || binary < waited {
		t.Fatalf("uninstall's plan %v; want safe-ipam's config removed, a wait, then the binary", r.Plan.Describe())
	}
	assertSame(t, "after uninstall", f.snapshot(t), calico)
}

// A config that sorts before safe-ipam's own (Multus's 00-multus.conf,
// which delegates to the first config after it) hides nothing behind it:
// install refuses, and safe-ipam's config stays, still guarding Calico's
// network; so does a Calico .conf beside its .conflist, as Calico's
// installer leaves it while it renames one to the other.
func TestOwnConflistStaysWhereItHidesOnlyCalicos(t *testing.T) {
	for _, tc := range []struct{ name, file, data string }{
		{"Multus sorts first", "00-multus.conf", `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","kubeconfig":"/etc/cni/net.d/multus.d/multus.kubeconfig"}`},
		{"Calico's .conf beside its .conflist", "10-calico.conf", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if _, err := Install(f.node, OwnConflistMode{}, f.self, false); err != nil {
				t.Fatal(err)
			}
			data := tc.data
			if data == "" {
				c := cninode.ReadConf(f.node.conf("10-calico.conflist"))
				conf, err := c.PluginConfig(0)
				must(t, err)
				data = string(conf)
			}
			writeFile(t, f.node.conf(tc.file), data, 0o644)
			before := f.snapshot(t)
			if _, err := Install(f.node, OwnConflistMode{}, f.self, false); !errors.Is(err, ErrRefused) {
				t.Fatalf("install: %v; want a refusal", err)
			}
			assertSame(t, "after the refusal", f.snapshot(t), before)
		})
	}
}

// Something at safe-ipam's own name that cannot be read, a dangling
// symlink too, is not "nothing there": the other modes' installs refuse,
// changing nothing, rather than install beside what the runtime may read
// first once it points somewhere.
func TestADanglingLinkAtTheOwnNameRefuses(t *testing.T) {
	f := newFixture(t)
	must(t, os.Symlink(filepath.Join(t.TempDir(), "gone.conflist"), f.node.conf(cninode.OwnConflist)))
	before := f.snapshot(t)
	if _, err := Install(f.node, TakeoverMode{}, f.self, false); !errors.Is(err, ErrRefused) {
		t.Fatalf("takeover install beside a dangling %s: %v; want a refusal", cninode.OwnConflist, err)
	}
	assertSame(t, "after a refused install", f.snapshot(t), before)
}
