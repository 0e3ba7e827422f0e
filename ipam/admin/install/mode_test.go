package install

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// modeCase is one mode with what "protected" means for it.
type modeCase struct {
	mode      Mode
	protected func(t *testing.T, f *fixture) error
	// replaces says the mode replaces a file of Calico's, which it keeps
	// for uninstall, and which calico-node's installer undoes.
	replaces bool
}

var modes = []modeCase{
	{ConflistMode{}, conflistProtected, true},
	{TakeoverMode{}, takeoverProtected, true},
	{OwnConflistMode{}, ownConflistProtected, false},
}

// replacing are the modes that replace a file of Calico's.
func replacing() []modeCase {
	return slices.DeleteFunc(slices.Clone(modes), func(mc modeCase) bool { return !mc.replaces })
}

// ownConflistProtected: safe-ipam's own config is Calico's current one
// with its IPAM routed through safe-ipam, with Calico's file mode, and
// the first the runtime reads; Calico's files are as Calico wrote them.
func ownConflistProtected(t *testing.T, f *fixture) error {
	own := f.node.conf(cninode.OwnConflist)
	got, err := os.ReadFile(own)
	if err != nil {
		return err
	}
	want := bytes.Replace(f.installer.Network, []byte(`"type": "calico-ipam"`), []byte(`"type": "safe-ipam", "delegate": {"type": "calico-ipam"}`), 1)
	if !bytes.Equal(got, want) {
		return errors.New(cninode.OwnConflist + " is not Calico's current config with its ipam routed through safe-ipam:\n" + string(got))
	}
	if st, _ := os.Stat(own); st.Mode().Perm() != 0o600 {
		return errors.New(cninode.OwnConflist + " has not Calico's mode 0600: " + st.Mode().String())
	}
	confs, err := cninode.ReadConfs(f.node.ConfDir)
	must(t, err)
	if confs[0].Path != own {
		return fmt.Errorf("the runtime reads %s first", confs[0].Path)
	}
	calico, err := os.ReadFile(f.node.conf("10-calico.conflist"))
	must(t, err)
	if !bytes.Equal(calico, f.installer.Network) {
		return errors.New("own-conflist mode changed Calico's network config")
	}
	if ok, _ := cninode.IsSafeIPAM(f.node.bin(CalicoIPAM)); ok {
		return errors.New("bin/calico-ipam is safe-ipam")
	}
	if ok, _ := cninode.IsSafeIPAM(f.node.bin(builds.CNIBinary)); !ok {
		return errors.New("bin/safe-ipam is not safe-ipam")
	}
	return etcdBuildInstalled(f)
}

// conflistProtected: Calico's config routes its IPAM through safe-ipam,
// every other byte and the file's mode as Calico wrote them, and
// safe-ipam's config parser takes the plugin's config.
func conflistProtected(t *testing.T, f *fixture) error {
	path := f.node.conf("10-calico.conflist")
	got, err := os.ReadFile(path)
	must(t, err)
	want := bytes.Replace(f.installer.Network, []byte(`"type": "calico-ipam"`), []byte(`"type": "safe-ipam", "delegate": {"type": "calico-ipam"}`), 1)
	if !bytes.Equal(got, want) {
		return errors.New("10-calico.conflist is not Calico's with its ipam routed through safe-ipam:\n" + string(got))
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		return errors.New("10-calico.conflist lost its mode 0600: " + st.Mode().String())
	}
	c := cninode.ReadConf(path)
	conf, err := c.PluginConfig(0)
	must(t, err)
	if _, err := config.Parse(conf); err != nil {
		return err
	}
	if ok, _ := cninode.IsSafeIPAM(f.node.bin(builds.CNIBinary)); !ok {
		return errors.New("bin/safe-ipam is not safe-ipam")
	}
	return etcdBuildInstalled(f)
}

// installedConf is the config the runtime reads once mc is installed.
func installedConf(mc modeCase, f *fixture) string {
	if mc.mode.Name() == ModeOwnConflist {
		return f.node.conf(cninode.OwnConflist)
	}
	return f.node.conf("10-calico.conflist")
}

// etcdBuildInstalled: safe-ipam-etcd, which the CNI binary hands the calls
// over etcd to, is beside it, as built.
func etcdBuildInstalled(f *fixture) error {
	if same, err := sameContent(f.etcd, f.node.bin(builds.EtcdBinary)); err != nil || !same {
		return fmt.Errorf("bin/%s is not the CNI binary's etcd build (%v)", builds.EtcdBinary, err)
	}
	return nil
}

// takeoverProtected: calico-ipam is safe-ipam, Calico's config untouched.
func takeoverProtected(t *testing.T, f *fixture) error {
	if ok, _ := cninode.IsSafeIPAM(f.node.bin(CalicoIPAM)); !ok {
		return errors.New("bin/calico-ipam is not safe-ipam")
	}
	got, err := os.ReadFile(f.node.conf("10-calico.conflist"))
	must(t, err)
	if !bytes.Equal(got, f.installer.Network) {
		return errors.New("takeover changed Calico's network config")
	}
	return etcdBuildInstalled(f)
}

// The CNI binary a node runs is the lean build when its configs keep
// records in files, and the etcd build when they keep them in etcd: the
// lean one would hand each of those calls over, one more exec per call.
// The etcd build is beside it either way.
func TestModeInstallsTheBuildTheNodeCalls(t *testing.T) {
	for _, mc := range modes {
		for _, tc := range []struct {
			name     string
			kdd      bool     // Calico's datastore is Kubernetes (records in files by default)
			settings Settings // install's node settings
			want     func(f *fixture) string
		}{
			{"records in Calico's etcd", false, nil, func(f *fixture) string { return f.etcd }},
			{"records in files, Calico on etcd", false, Settings{"store": map[string]string{"type": config.StoreFile}}, func(f *fixture) string { return f.self }},
			{"records in files, Calico on Kubernetes", true, nil, func(f *fixture) string { return f.self }},
		} {
			t.Run(mc.mode.Name()+"/"+tc.name, func(t *testing.T) {
				f := newFixture(t)
				if tc.kdd {
					kdd := bytes.Replace(f.installer.Network, []byte(`"etcd_endpoints": "http://10.0.0.10:2379"`), []byte(`"datastore_type": "kubernetes"`), 1)
					if bytes.Equal(kdd, f.installer.Network) {
						t.Fatalf("the fixture's config names no etcd_endpoints:\n%s", kdd)
					}
					f.installer.Network = kdd
					must(t, f.installer.Run())
				}
				if _, err := InstallWith(f.node, mc.mode, f.self, tc.settings, false); err != nil {
					t.Fatal(err)
				}
				cniPath := f.node.bin(builds.CNIBinary)
				if mc.mode.Name() == ModeTakeover {
					cniPath = f.node.bin(CalicoIPAM)
				}
				if same, err := sameContent(tc.want(f), cniPath); err != nil || !same {
					t.Errorf("%s is not %s (%v)", cniPath, tc.want(f), err)
				}
				if err := etcdBuildInstalled(f); err != nil {
					t.Error(err)
				}
				if err := mc.protected(t, f); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// uninstall runs every mode's uninstall in turn: the mode a node was not
// installed in leaves the etcd build to the CNI binary still there, which
// hands it calls; the mode it was installed in takes both off.
func TestUninstallOfTheOtherModeKeepsTheEtcdBuild(t *testing.T) {
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			if _, err := Install(f.node, mc.mode, f.self, false); err != nil {
				t.Fatal(err)
			}
			var other Mode = TakeoverMode{}
			if mc.mode.Name() == ModeTakeover {
				other = ConflistMode{}
			}
			if _, err := Uninstall(f.node, other, false); err != nil {
				t.Fatalf("%s uninstall: %v", other.Name(), err)
			}
			if err := mc.protected(t, f); err != nil {
				t.Fatalf("after the %s uninstall: %v", other.Name(), err)
			}
			if _, err := Uninstall(f.node, mc.mode, false); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(f.node.bin(builds.EtcdBinary)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after the %s uninstall: %s is still there (%v)", mc.mode.Name(), builds.EtcdBinary, err)
			}
		})
	}
}

// The etcd build lands before the CNI binary that hands calls to it: a
// node is never left, even between two steps, with a CNI binary whose
// calls over etcd have nowhere to go.
func TestModeInstallsEtcdBuildFirst(t *testing.T) {
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			r, err := Install(f.node, mc.mode, f.self, true)
			if err != nil {
				t.Fatal(err)
			}
			cniPath := f.node.bin(builds.CNIBinary)
			if mc.mode.Name() == ModeTakeover {
				cniPath = f.node.bin(CalicoIPAM)
			}
			etcd, cni := -1, -1
			for i, s := range r.Plan.Steps {
				switch {
				case s.from != "" && s.Path == f.node.bin(builds.EtcdBinary):
					etcd = i
				case s.from != "" && s.Path == cniPath:
					cni = i
				}
			}
			if etcd < 0 || cni < 0 || etcd > cni {
				t.Errorf("plan copies the etcd build at step %d and the CNI binary at %d; want both, the etcd build first:\n%s", etcd, cni, r.Plan.Describe())
			}
		})
	}
}

// The contract both modes keep: install protects, a second install
// changes nothing, uninstall restores every byte and mode, a second
// uninstall changes nothing.
func TestModeContract(t *testing.T) {
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			before := f.snapshot(t)
			if err := mc.protected(t, f); err == nil {
				t.Fatal("the fixture is protected before any install")
			}
			for round := 1; round <= 2; round++ {
				r, err := Install(f.node, mc.mode, f.self, false)
				if err != nil {
					t.Fatalf("install %d: %v", round, err)
				}
				if r.Applied != (round == 1) {
					t.Errorf("install %d applied %v: %v", round, r.Applied, r.Plan.Describe())
				}
				if err := mc.protected(t, f); err != nil {
					t.Fatalf("after install %d: %v", round, err)
				}
			}
			installed := f.snapshot(t)
			for round := 1; round <= 2; round++ {
				r, err := Uninstall(f.node, mc.mode, false)
				if err != nil {
					t.Fatalf("uninstall %d: %v", round, err)
				}
				if r.Applied != (round == 1) || len(r.Notes) > 0 {
					t.Errorf("uninstall %d applied %v, notes %v", round, r.Applied, r.Notes)
				}
				assertSame(t, "after uninstall", f.snapshot(t), before)
			}
			if len(installed) == len(before) && mc.mode.Name() == ModeConflist {
				t.Error("conflist mode added no file (safe-ipam and the kept originals)")
			}
		})
	}
}

// A dry run plans and changes nothing.
func TestModeDryRun(t *testing.T) {
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			before := f.snapshot(t)
			r, err := Install(f.node, mc.mode, f.self, true)
			if err != nil || r.Applied || r.Plan.Empty() {
				t.Fatalf("dry run: %+v, %v", r, err)
			}
			assertSame(t, "after a dry run", f.snapshot(t), before)
		})
	}
}

// calico-node restarts (an upgrade: new binary, new config) undo the
// install; installing again protects the node, and uninstall then brings
// back what Calico wrote last, not what it wrote before the install.
func TestModeReassertKeepsCalicosLatest(t *testing.T) {
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := installedThenCalicoRestarts(t, mc)
			latest := withoutInstalled(f.snapshot(t))
			r, err := Install(f.node, mc.mode, f.self, false)
			if err != nil || !r.Applied {
				t.Fatalf("re-assert: %+v, %v", r, err)
			}
			if err := mc.protected(t, f); err != nil {
				t.Fatal(err)
			}
			if _, err := Uninstall(f.node, mc.mode, false); err != nil {
				t.Fatal(err)
			}
			// Install's backups are gone, Calico's latest files are back.
			assertSame(t, "after uninstall", f.snapshot(t), latest)
		})
	}
}

// installedThenCalicoRestarts is a fixture with mc installed, then
// undone by calico-node's installer (an upgrade: new binary and config).
func installedThenCalicoRestarts(t *testing.T, mc modeCase) *fixture {
	t.Helper()
	f := newFixture(t)
	if _, err := Install(f.node, mc.mode, f.self, false); err != nil {
		t.Fatal(err)
	}
	f.calicoRestarts(t, "v2")
	if err := mc.protected(t, f); err == nil {
		t.Fatal("still protected after calico-node's installer ran")
	}
	return f
}

// Uninstall keeps a file someone changed after install, and says so.
func TestUninstallKeepsLaterChanges(t *testing.T) {
	for _, mc := range replacing() {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := installedThenCalicoRestarts(t, mc)
			latest := f.snapshot(t)
			r, err := Uninstall(f.node, mc.mode, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Notes) == 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "changed since install") {
				t.Errorf("uninstall notes %v; want the changed file named", r.Notes)
			}
			assertSame(t, "after uninstall", f.snapshot(t), withoutInstalled(latest))
		})
	}
}

// withoutInstalled is a snapshot less what install added: its backups
// and records, bin/safe-ipam, bin/safe-ipam-etcd and safe-ipam's own
// config (the fixture has none of its own).
func withoutInstalled(snap map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range snap {
		base := k[strings.LastIndexByte(k, '/')+1:]
		if !isBackupName(base) && base != builds.CNIBinary && base != builds.EtcdBinary && base != cninode.OwnConflist {
			out[k] = v
		}
	}
	return out
}

// refusal is bad input every mode must refuse without changing anything.
type refusal struct {
	name  string
	setup func(t *testing.T, f *fixture) (cleanup func())
	want  string // in the error
}

var refusals = []refusal{
	{"no Calico network config", func(t *testing.T, f *fixture) func() {
		must(t, os.Remove(f.node.conf("10-calico.conflist")))
		return nil
	}, "no network config in"},
	{"a config that does not parse", func(t *testing.T, f *fixture) func() {
		writeFile(t, f.node.conf("05-broken.conflist"), `{"name": "k8s-pod-network", "plugins": [`, 0o644)
		return nil
	}, "05-broken.conflist does not parse"},
	{"calico-ipam missing", func(t *testing.T, f *fixture) func() {
		must(t, os.Remove(f.node.bin(CalicoIPAM)))
		return nil
	}, "calico-ipam"},
	{"read-only bin dir", readOnlyBinDir, "read-only file system"},
	{"no etcd build beside the CNI binary", func(t *testing.T, f *fixture) func() {
		must(t, os.Remove(f.etcd))
		return nil
	}, builds.EtcdBinary},
	{"another install holds the lock", func(t *testing.T, f *fixture) func() {
		unlock, err := f.node.lock()
		must(t, err)
		return unlock
	}, "another safe-ipam install"},
	{"conf dir is not a directory", func(t *testing.T, f *fixture) func() {
		f.node.ConfDir = f.node.conf("10-calico.conflist")
		return nil
	}, "not a directory"},
}

func TestModeRefusalsChangeNothing(t *testing.T) {
	for _, mc := range modes {
		for _, rc := range refusals {
			t.Run(mc.mode.Name()+"/"+rc.name, func(t *testing.T) {
				f := newFixture(t)
				dirs := f.node
				if cleanup := rc.setup(t, f); cleanup != nil {
					defer cleanup()
				}
				before := snapshotOf(t, dirs)
				_, err := Install(f.node, mc.mode, f.self, false)
				if err == nil || !strings.Contains(err.Error(), rc.want) {
					t.Fatalf("install: %v; want an error saying %q", err, rc.want)
				}
				t.Logf("refused: %v", err)
				assertSame(t, "after a refused install", snapshotOf(t, dirs), before)
			})
		}
	}
}

// With the conf dir read-only, the conflist modes can stage safe-ipam's
// binary but not the config: the binary must not land either.
func TestConflistModeReadOnlyConfDirChangesNothing(t *testing.T) {
	for _, mode := range []Mode{ConflistMode{}, OwnConflistMode{}} {
		t.Run(mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			defer readOnlyMount(t, f.node.ConfDir)()
			before := f.snapshot(t)
			_, err := Install(f.node, mode, f.self, false)
			if err == nil || !strings.Contains(err.Error(), "read-only file system") {
				t.Fatalf("install: %v; want a refusal naming the read-only file system", err)
			}
			assertSame(t, "after a refused install", f.snapshot(t), before)
		})
	}
}

func snapshotOf(t *testing.T, n Node) map[string]string {
	return (&fixture{node: n}).snapshot(t)
}

// readOnlyBinDir bind-mounts the bin dir read-only over itself: root
// writes through a chmod, not through a read-only mount.
func readOnlyBinDir(t *testing.T, f *fixture) func() {
	t.Helper()
	return readOnlyMount(t, f.node.BinDir)
}

func readOnlyMount(t *testing.T, dir string) func() {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: a read-only mount needs root")
		}
		t.Skip("a read-only mount needs root")
	}
	for _, args := range [][]string{{"--bind", dir, dir}, {"-o", "remount,bind,ro", dir}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v: %s", args, err, out)
		}
	}
	return func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	}
}

// Issue 20, finding 6: uninstall restores only the file install kept, by
// the SHA-256 install recorded. A backup that was replaced is left where
// it is, with what stands in Calico's place, and uninstall says so, as
// it does for a backup whose recorded sum is gone.
func TestUninstallRestoresOnlyWhatInstallKept(t *testing.T) {
	tests := []struct {
		name    string
		tamper  func(t *testing.T, backup, sum string)
		refused bool
		note    string
	}{
		{"the file install kept", func(*testing.T, string, string) {}, false, ""},
		{"a symlink to a missing file", func(t *testing.T, backup, _ string) {
			must(t, os.Remove(backup))
			must(t, os.Symlink("/nonexistent/calico", backup))
		}, true, "not a regular file"},
		{"another regular file", func(t *testing.T, backup, _ string) {
			must(t, os.Remove(backup))
			writeFile(t, backup, "#!/bin/sh\necho not calico\n", 0o755)
		}, true, "SHA-256"},
		// Issue 33, finding 8: every install records the sum with the
		// backup it keeps, so a missing one was removed.
		{"its recorded sum removed", func(t *testing.T, _, sum string) {
			must(t, os.Remove(sum))
		}, true, "no SHA-256"},
	}
	for _, mc := range replacing() {
		for _, tt := range tests {
			t.Run(mc.mode.Name()+"/"+tt.name, func(t *testing.T) {
				f := newFixture(t)
				before := f.snapshot(t)
				if _, err := Install(f.node, mc.mode, f.self, false); err != nil {
					t.Fatal(err)
				}
				path := f.node.bin(CalicoIPAM)
				if mc.mode.Name() == ModeConflist {
					path = f.node.conf("10-calico.conflist")
				}
				tt.tamper(t, backupPath(path), sumPath(path))
				tampered := f.snapshot(t)
				r, err := Uninstall(f.node, mc.mode, false)
				if tt.refused {
					if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.note) || !strings.Contains(err.Error(), backupPath(path)) {
						t.Fatalf("uninstall = %v; want a refusal naming %s and saying %q", err, backupPath(path), tt.note)
					}
					assertSame(t, "after a refused uninstall", f.snapshot(t), tampered)
					return
				}
				if err != nil {
					t.Fatalf("uninstall: %v", err)
				}
				if tt.note != "" && !strings.Contains(strings.Join(r.Notes, "\n"), tt.note) {
					t.Errorf("notes %v; want one saying %q", r.Notes, tt.note)
				}
				assertSame(t, "after uninstall", f.snapshot(t), before)
			})
		}
	}
}

// Issue 22: install writes the node settings beside the binary, where
// calico-node's installer never writes; a later install without settings
// keeps them; uninstall removes them with the last safe-ipam binary and
// leaves the node as it was.
func TestInstallWritesNodeSettingsUninstallRemovesThem(t *testing.T) {
	for _, mc := range modes {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			if _, err := InstallWith(f.node, mc.mode, f.self, Settings{"delegateHandles": "pod"}, false); err != nil {
				t.Fatal(err)
			}
			path := f.node.bin(config.NodeSettingsFile)
			read := func() string {
				data, _ := os.ReadFile(path)
				return string(data)
			}
			if !strings.Contains(read(), `"delegateHandles": "pod"`) {
				t.Fatalf("node settings %q", read())
			}
			f.calicoRestarts(t, "v3.31.1")
			if _, err := Install(f.node, mc.mode, f.self, false); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(read(), `"delegateHandles": "pod"`) {
				t.Fatalf("after Calico's restart and a re-install: node settings %q", read())
			}
			if _, err := Uninstall(f.node, mc.mode, false); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("node settings left after uninstall: %v", err)
			}
		})
	}
}

// Issue 42, item 6: a backup with no recorded SHA-256 (its record
// removed, or an older safe-ipam's) is refused by install too, which
// recorded the sum of whatever was there (every DaemonSet start runs
// install), laundering a swapped backup. The operator checks the file and
// records its sum, as the refusal says; then install and uninstall go on.
func TestInstallRefusesABackupNothingVouchesFor(t *testing.T) {
	for _, mc := range replacing() {
		t.Run(mc.mode.Name(), func(t *testing.T) {
			f := newFixture(t)
			before := f.snapshot(t)
			if _, err := Install(f.node, mc.mode, f.self, false); err != nil {
				t.Fatal(err)
			}
			path := f.node.bin(CalicoIPAM)
			if mc.mode.Name() == ModeConflist {
				path = f.node.conf("10-calico.conflist")
			}
			must(t, os.Remove(sumPath(path))) // removed, or as an older safe-ipam left it
			_, err := Install(f.node, mc.mode, f.self, false)
			if err == nil || !strings.Contains(err.Error(), "sha256sum "+backupPath(path)) {
				t.Fatalf("install over a backup nothing vouches for: %v; want a refusal saying how to record its sum", err)
			}
			if _, err := os.Stat(sumPath(path)); err == nil {
				t.Fatal("install recorded the sum of a backup it did not keep")
			}
			sum, err := fileSum(backupPath(path)) // the operator checks it, and records it
			must(t, err)
			must(t, os.WriteFile(sumPath(path), []byte(sum+"\n"), 0o600))
			if _, err := Install(f.node, mc.mode, f.self, false); err != nil {
				t.Fatalf("install once the sum is recorded: %v", err)
			}
			if _, err := Uninstall(f.node, mc.mode, false); err != nil {
				t.Fatalf("uninstall: %v", err)
			}
			assertSame(t, "after uninstall", f.snapshot(t), before)
		})
	}
}

// Issue 44, item 2: an install run once switches a takeover node to
// conflist mode; uninstall
// then takes it all off, back to Calico's own files. A watch's install
// never switches (it would fight a switch made by hand), nor does one
// while a watch keeps the node; the way back to takeover is uninstall
// first, and a takeover install on a conflist node refuses, changing
// nothing.
func TestInstallSwitchesFromTakeoverToConflist(t *testing.T) {
	f := newFixture(t)
	calico := f.snapshot(t)
	if _, err := Install(f.node, TakeoverMode{}, f.self, false); err != nil {
		t.Fatal(err)
	}
	takeover := f.snapshot(t)
	if _, err := Install(f.node, ConflistMode{}, f.self, false); !errors.Is(err, ErrRefused) {
		t.Fatalf("a watch's conflist install on a takeover node: %v; want a refusal", err)
	}
	release, err := f.node.holdWatched() // what a running watch holds
	must(t, err)
	if _, err := Install(f.node, ConflistMode{SwitchFromTakeover: true}, f.self, false); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "watch") {
		t.Fatalf("a switch while a watch keeps the node: %v; want a refusal naming the watch", err)
	}
	release()
	assertSame(t, "after refused switches", f.snapshot(t), takeover)
	r, err := Install(f.node, ConflistMode{SwitchFromTakeover: true}, f.self, false)
	if err != nil {
		t.Fatalf("switch to conflist: %v", err)
	}
	if err := conflistProtected(t, f); err != nil {
		t.Fatalf("after the switch: %v", err)
	}
	// The order of its steps: TestASwitchFromTakeoverRoutesEveryCallThroughSafeIPAM.
	if !r.Plan.restores(f.node.bin(CalicoIPAM)) {
		t.Fatalf("the switch's plan %v does not put Calico's calico-ipam back", r.Plan.Describe())
	}
	conflist := f.snapshot(t)
	if _, err := Install(f.node, TakeoverMode{}, f.self, false); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "uninstall, then install --mode=takeover") {
		t.Fatalf("takeover install on a conflist node: %v; want a refusal saying how to switch", err)
	}
	assertSame(t, "after the refused takeover", f.snapshot(t), conflist)
	if _, err := Uninstall(f.node, ConflistMode{}, false); err != nil {
		t.Fatal(err)
	}
	assertSame(t, "after the switch and uninstall", f.snapshot(t), calico)
}
