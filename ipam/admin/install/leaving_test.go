package install

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// A switch from takeover, in either conflist mode, lands one step at a
// time while the runtime may go on calling with any config it read since
// the last pause (it reads the conf dir again some time after a change):
// at every step each such config reaches Calico through safe-ipam. The
// failure it guards against: calico-ipam put back while the runtime
// still read Calico's config, so a DEL reached Calico alone, freed an
// address behind its record, and the record then fenced a pod start
// (TestDaemonSetUpgrade, in CI).
func TestASwitchFromTakeoverRoutesEveryCallThroughSafeIPAM(t *testing.T) {
	for _, m := range []Mode{ConflistMode{SwitchFromTakeover: true}, OwnConflistMode{SwitchFromTakeover: true}} {
		t.Run(m.Name(), func(t *testing.T) {
			f := newFixture(t)
			p := stagedSwitch(t, f, m)
			held := []string{firstConf(t, f)}
			for i := range p.Steps {
				s := &p.Steps[i]
				must(t, s.commit())
				if s.pause > 0 {
					held = nil
				}
				held = append(held, firstConf(t, f))
				for _, raw := range held {
					if err := reachesCalicoThroughSafeIPAM(f, raw); err != nil {
						t.Fatalf("after step %d (%s: %s), a runtime that read the conf dir since the last pause: %v", i, s.Action, s.Path, err)
					}
				}
			}
			protected := conflistProtected
			if m.Name() == ModeOwnConflist {
				protected = ownConflistProtected
			}
			if err := protected(t, f); err != nil {
				t.Fatalf("after the switch: %v", err)
			}
		})
	}
}

// firstConf is the config the runtime reads now: the first in the conf
// dir, as its bytes.
func firstConf(t *testing.T, f *fixture) string {
	t.Helper()
	confs, err := cninode.ReadConfs(f.node.ConfDir)
	must(t, err)
	return string(confs[0].Raw)
}

// reachesCalicoThroughSafeIPAM follows the IPAM of raw's Calico plugin
// through the bin dir as it is now: safe-ipam must run, then Calico's
// binary, never safe-ipam again.
func reachesCalicoThroughSafeIPAM(f *fixture, raw string) error {
	c := cninode.ParseConf("conf", []byte(raw), 0o600)
	if c.Err != nil {
		return c.Err
	}
	for i, pl := range c.Plugins {
		if pl.Type != CalicoBinary {
			continue
		}
		stdin, err := c.PluginConfig(i)
		if err != nil {
			return err
		}
		var ipam struct {
			IPAM struct {
				Type     string `json:"type"`
				Delegate struct {
					Type, Binary string
				} `json:"delegate"`
			} `json:"ipam"`
		}
		if err := json.Unmarshal(pl.Raw, &ipam); err != nil {
			return err
		}
		first, delegate := ipam.IPAM.Type, CalicoBinary // takeover's safe-ipam runs Calico's binary
		if first == builds.CNIBinary {
			delegate = cmp.Or(ipam.IPAM.Delegate.Binary, ipam.IPAM.Delegate.Type)
			if _, err := config.Parse(stdin); err != nil {
				return fmt.Errorf("safe-ipam refuses it: %w", err)
			}
		}
		if ok, err := cninode.IsSafeIPAM(f.node.bin(first)); err != nil || !ok {
			return fmt.Errorf("its IPAM %s runs %s, not safe-ipam (%v)", first, filepath.Base(f.node.bin(first)), err)
		}
		if ok, err := cninode.IsSafeIPAM(f.node.bin(delegate)); err != nil || ok {
			return fmt.Errorf("safe-ipam's delegate %s is not Calico's binary (safe-ipam: %v, %v)", delegate, ok, err)
		}
		return nil
	}
	return fmt.Errorf("no Calico plugin in %s", raw)
}

// A switch cut short (the install killed in its pause, or after
// calico-ipam went back) leaves configs in their first form: the next
// install (a watch's too, once calico-ipam is Calico's) gives them their
// steady form, and uninstall takes them off, back to Calico's files.
func TestASwitchCutShortIsFinishedOrUndone(t *testing.T) {
	for _, m := range []Mode{ConflistMode{SwitchFromTakeover: true}, OwnConflistMode{SwitchFromTakeover: true}} {
		for _, cut := range []string{"in the pause", "after calico-ipam went back"} {
			t.Run(m.Name()+", "+cut, func(t *testing.T) {
				f := newFixture(t)
				calico := f.snapshot(t)
				p := stagedSwitch(t, f, m)
				restored := false
				for i := range p.Steps {
					s := &p.Steps[i]
					if (cut == "in the pause" && s.pause > 0) || (restored && s.rename == "") {
						break
					}
					must(t, s.commit())
					restored = restored || s.rename != ""
				}
				p.discard()
				again := m
				if restored {
					again, _ = ModeNamed(m.Name()) // a watch's install: no switch
				}
				if _, err := Install(f.node, again, f.self, false); err != nil {
					t.Fatalf("install after the cut: %v", err)
				}
				protected := conflistProtected
				if m.Name() == ModeOwnConflist {
					protected = ownConflistProtected
				}
				if err := protected(t, f); err != nil {
					t.Fatalf("after the cut and an install: %v", err)
				}
				for _, name := range ModeNames {
					um, err := ModeNamed(name)
					must(t, err)
					if _, err := Uninstall(f.node, um, false); err != nil {
						t.Fatalf("%s uninstall: %v", name, err)
					}
				}
				assertSame(t, "after uninstall", f.snapshot(t), calico)
			})
		}
	}
}

// stagedSwitch installs takeover mode on f, then plans m's switch from it
// and stages every step, for the test to land them one at a time.
func stagedSwitch(t *testing.T, f *fixture, m Mode) *Plan {
	t.Helper()
	if _, err := Install(f.node, TakeoverMode{}, f.self, false); err != nil {
		t.Fatal(err)
	}
	f.node.ReloadWait = time.Millisecond
	p, err := m.Install(f.node, f.self)
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Steps {
		must(t, p.Steps[i].stage())
	}
	return p
}
