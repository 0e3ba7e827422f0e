package install

import (
	"bytes"
	"fmt"
	"path/filepath"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// ConflistMode rewrites every Calico network config so that its IPAM is
// safe-ipam with calico-ipam as the delegate, and installs safe-ipam as
// <bin>/safe-ipam. Calico's main plugin then ignores its pool and ipAddrs
// annotations, which it applies only to an IPAM named calico-ipam.
type ConflistMode struct {
	// SwitchFromTakeover lets Install switch a node in takeover mode
	// (leaveTakeover), unless a watch keeps it there: what an install
	// run once does, and never a watch.
	SwitchFromTakeover bool
}

func (ConflistMode) Name() string { return ModeConflist }

func (m ConflistMode) Install(n Node, self string) (*Plan, error) {
	if err := n.checkDirs(); err != nil {
		return nil, refuse("%v", err)
	}
	confs, err := calicoConfs(n, true)
	if err != nil {
		return nil, err
	}
	if err := n.ownConflistInstalled(ModeConflist); err != nil {
		return nil, err
	}
	p, err := n.planSafeIPAMBinary(ModeConflist, self, m.SwitchFromTakeover)
	if err != nil {
		return nil, err
	}
	for _, c := range confs {
		if !needsRoute(c) {
			// Routed by an earlier install, maybe by an older safe-ipam
			// that kept the original without its SHA-256.
			if err := requireSum(c.Path); err != nil {
				return nil, err
			}
			continue
		}
		routed, err := routeThroughSafeIPAM(c)
		if err != nil {
			return nil, refuse("%v", err)
		}
		if err := keepOriginal(p, c.Path); err != nil {
			return nil, err
		}
		p.add(writeStep("route calico-ipam through safe-ipam", c.Path, routed, c.Perm))
	}
	return p, nil
}

// planSafeIPAMBinary plans what the conflist modes put in the bin dir:
// safe-ipam as <bin>/safe-ipam with calico-ipam, Calico's, as its
// delegate; from a takeover node, calico-ipam back first (leaveTakeover).
func (n Node) planSafeIPAMBinary(mode, self string, switchFromTakeover bool) (*Plan, error) {
	if err := requireFile(n.bin(CalicoIPAM), "the delegate"); err != nil {
		return nil, err
	}
	taken, err := cninode.IsSafeIPAM(n.bin(CalicoIPAM))
	if err != nil {
		return nil, refuse("%v", err)
	}
	p := &Plan{}
	if err := installBuilds(p, n, n.bin(builds.CNIBinary), self); err != nil {
		return nil, err
	}
	if taken {
		if err := n.leaveTakeover(p, mode, switchFromTakeover); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// leaveTakeover plans the switch from takeover mode: Calico's calico-ipam
// back from the original install kept, once safe-ipam is in conflist
// mode's place and before any config routes through it. In the other
// order a config would route through safe-ipam while calico-ipam is
// safe-ipam itself, a delegate it refuses: every pod start would fail.
// Without an original to restore, while a watch keeps the node in
// takeover mode, or when switching is not allowed (a watch's install), it
// refuses, changing nothing. The way back to takeover mode is uninstall,
// then install --mode=takeover (docs/install.md, "Switching modes").
func (n Node) leaveTakeover(p *Plan, mode string, allowed bool) error {
	path := n.bin(CalicoIPAM)
	if !allowed {
		return refuse("%s is safe-ipam (takeover mode): switch with install --mode=%s run once, not a watch", path, mode)
	}
	release, err := n.notWatched()
	if err != nil {
		return refuse("switching %s from takeover mode: %v", path, err)
	}
	release()
	if _, err := uninstallFile(p, path, func() (bool, error) { return cninode.IsSafeIPAM(path) }); err != nil {
		return refuse("%v", err)
	}
	if !p.restores(path) {
		return refuse("%s is safe-ipam (takeover mode), and install kept no original of Calico's calico-ipam to put back for %s mode: run safe-ipam uninstall first", path, mode)
	}
	return nil
}

func needsRoute(c *cninode.Conf) bool {
	for _, p := range c.Plugins {
		if p.UsesCalicoIPAM() {
			return true
		}
	}
	return false
}

func (ConflistMode) Uninstall(n Node) (*Plan, []string, error) {
	if err := n.checkDirs(); err != nil {
		return nil, nil, refuse("%v", err)
	}
	files, err := cninode.ConfFiles(n.ConfDir)
	if err != nil {
		return nil, nil, refuse("%v", err)
	}
	p := &Plan{}
	var notes []string
	for _, f := range files {
		if filepath.Base(f) == cninode.OwnConflist {
			continue // own-conflist mode's, which undoes it first
		}
		more, err := uninstallFile(p, f, func() (bool, error) { return stillRouted(f) })
		if err != nil {
			return nil, nil, refuse("%v", err)
		}
		notes = append(notes, more...)
	}
	more, err := n.uninstallSafeIPAMBinary(p, files)
	if err != nil {
		return nil, nil, err
	}
	return p, append(notes, more...), nil
}

// uninstallSafeIPAMBinary plans the removal of <bin>/safe-ipam and its
// etcd build, the conflist modes' binaries, unless a config of files that
// p leaves still names safe-ipam (keepsSafeIPAMNamed).
func (n Node) uninstallSafeIPAMBinary(p *Plan, files []string) ([]string, error) {
	notes, err := uninstallFile(p, n.bin(builds.CNIBinary), func() (bool, error) { return cninode.IsSafeIPAM(n.bin(builds.CNIBinary)) })
	if err != nil {
		return nil, refuse("%v", err)
	}
	if err := keepsSafeIPAMNamed(n, p, files); err != nil {
		return nil, err
	}
	more, err := uninstallEtcdBuild(p, n)
	if err != nil {
		return nil, refuse("%v", err)
	}
	return append(notes, more...), nil
}

// keepsSafeIPAMNamed refuses a plan that takes safe-ipam's binary off the
// node while a network config it leaves still names safe-ipam as its
// IPAM: every pod start would then fail (plugin not found). Such a
// config is Calico's own rendering of the calico-config patch
// (deploy/calico-config-conflist.patch.yaml), which install never wrote,
// so it has nothing to restore: calico-config must be reverted first.
func keepsSafeIPAMNamed(n Node, p *Plan, files []string) error {
	if !p.removes(n.bin(builds.CNIBinary)) {
		return nil
	}
	for _, f := range files {
		if p.restores(f) || p.removes(f) {
			continue
		}
		c := cninode.ReadConf(f)
		if c.Err != nil || !namesSafeIPAM(c) {
			continue
		}
		if filepath.Base(f) == cninode.OwnConflist {
			return refuse("%s, safe-ipam's own network config, names %s: run safe-ipam uninstall without --mode (own-conflist mode's goes first)", f, n.bin(builds.CNIBinary))
		}
		return refuse("%s names safe-ipam as its IPAM, and uninstall has no original of it to restore "+
			"(calico-node renders it from calico-config patched with deploy/calico-config-conflist.patch.yaml): "+
			"without %s every pod start on this node would fail. First give calico-config Calico's network config back "+
			"(kubectl -n kube-system patch configmap calico-config --type merge --patch-file deploy/calico-config-conflist.revert.yaml), "+
			"then kubectl -n kube-system rollout restart daemonset calico-node and wait for its rollout status: "+
			"calico-node then writes a config naming calico-ipam, which works with or without safe-ipam. Then uninstall again (docs/install.md, \"Uninstalling from a cluster\")",
			f, n.bin(builds.CNIBinary))
	}
	return nil
}

func namesSafeIPAM(c *cninode.Conf) bool {
	for _, pl := range c.Plugins {
		if pl.IPAMType == builds.CNIBinary || pl.Type == builds.CNIBinary {
			return true
		}
	}
	return false
}

// stillRouted says whether the file at path is exactly what install made
// of the original it kept.
func stillRouted(path string) (bool, error) {
	orig := cninode.ReadConf(backupPath(path))
	if orig.Err != nil {
		return false, nil
	}
	want, err := routeThroughSafeIPAM(orig)
	if err != nil {
		return false, nil
	}
	cur, err := bounded.Read(path, bounded.Small)
	if err != nil {
		return false, fmt.Errorf("reading %w", err)
	}
	return bytes.Equal(cur, want), nil
}
