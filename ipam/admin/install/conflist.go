package install

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

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
	p, l, err := n.planSafeIPAMBinary(ModeConflist, self, m.SwitchFromTakeover)
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
			l.steadyAgain(p, c)
			continue
		}
		if err := keepOriginal(p, c.Path); err != nil {
			return nil, err
		}
		if err := l.route(p, "route calico-ipam through safe-ipam", c, c.Path, c.Perm); err != nil {
			return nil, err
		}
	}
	l.finish(p, n.ReloadWait)
	return p, nil
}

// planSafeIPAMBinary plans what the conflist modes put in the bin dir:
// safe-ipam as <bin>/safe-ipam with calico-ipam, Calico's, as its
// delegate. On a takeover node it also returns the switch (leaving),
// which puts calico-ipam back once the configs are routed.
func (n Node) planSafeIPAMBinary(mode, self string, switchFromTakeover bool) (*Plan, *leaving, error) {
	if err := requireFile(n.bin(CalicoIPAM), "the delegate"); err != nil {
		return nil, nil, err
	}
	taken, err := cninode.IsSafeIPAM(n.bin(CalicoIPAM))
	if err != nil {
		return nil, nil, refuse("%v", err)
	}
	p := &Plan{}
	if err := installBuilds(p, n, n.bin(builds.CNIBinary), self); err != nil {
		return nil, nil, err
	}
	if !taken {
		return p, nil, nil
	}
	l, err := n.leaveTakeover(mode, switchFromTakeover)
	if err != nil {
		return nil, nil, err
	}
	return p, l, nil
}

// leaving is the switch from takeover mode. Calico's calico-ipam goes
// back (restore) only once the runtimes have had Node.ReloadWait to read
// configs routed through safe-ipam with Calico's multi-call binary as the
// delegate's file (routeWhileLeavingTakeover), which reach Calico through
// safe-ipam whatever calico-ipam is; then the configs take their steady
// form (steady). Every call goes through safe-ipam all along: a runtime
// still reading Calico's config reaches takeover's safe-ipam, one that
// read the new config safe-ipam. Restored first, calico-ipam would be
// Calico's while the runtime still read Calico's config: a DEL there
// would free an address behind its record, which then fences a pod start.
// Routed to calico-ipam first, a config would reach safe-ipam through
// safe-ipam, a delegate it refuses: every pod start would fail.
type leaving struct {
	restore []Step
	steady  []Step
}

// leaveTakeover plans putting Calico's calico-ipam back from the
// original install kept. Without one to restore, while a watch keeps the
// node in takeover mode, or when switching is not allowed (a watch's
// install), it refuses, changing nothing. The way back to takeover mode
// is uninstall, then install --mode=takeover (docs/install.md,
// "Switching modes").
func (n Node) leaveTakeover(mode string, allowed bool) (*leaving, error) {
	path := n.bin(CalicoIPAM)
	if !allowed {
		return nil, refuse("%s is safe-ipam (takeover mode): switch with install --mode=%s run once, not a watch", path, mode)
	}
	if err := requireFile(n.bin(CalicoBinary), "Calico's multi-call binary, the delegate while calico-ipam goes back"); err != nil {
		return nil, err
	}
	release, err := n.notWatched()
	if err != nil {
		return nil, refuse("switching %s from takeover mode: %v", path, err)
	}
	release()
	p := &Plan{}
	if _, err := uninstallFile(p, path, func() (bool, error) { return cninode.IsSafeIPAM(path) }); err != nil {
		return nil, refuse("%v", err)
	}
	if !p.restores(path) {
		return nil, refuse("%s is safe-ipam (takeover mode), and install kept no original of Calico's calico-ipam to put back for %s mode: run safe-ipam uninstall first", path, mode)
	}
	return &leaving{restore: p.Steps}, nil
}

// route plans writing c, routed through safe-ipam, at path: in its steady
// form, or, while leaving takeover (l not nil), in the form that runs
// Calico's binary, the steady one kept for finish.
func (l *leaving) route(p *Plan, action string, c *cninode.Conf, path string, perm os.FileMode) error {
	steady, err := routeThroughSafeIPAM(c)
	if err != nil {
		return refuse("%v", err)
	}
	if l == nil {
		p.add(writeStep(action, path, steady, perm))
		return nil
	}
	moving, err := routeWhileLeavingTakeover(c)
	if err != nil {
		return refuse("%v", err)
	}
	p.add(writeStep(action+", the delegate Calico's multi-call binary while calico-ipam goes back", path, moving, perm))
	l.steady = append(l.steady, writeStep(action+", in its steady form", path, steady, perm))
	return nil
}

// switchWaits is how many Node.ReloadWait a switch pauses before
// calico-ipam goes back: a call that read Calico's config before the
// pause reaches calico-ipam only after its main plugin's own work (on the
// Kubernetes datastore a DEL asks the API server first), which the pause
// must outlast. One switch per node, once: 10 seconds with the default.
const switchWaits = 5

// finish ends the switch: the pause for the runtimes and the calls under
// way, calico-ipam back, the configs in their steady form.
func (l *leaving) finish(p *Plan, reload time.Duration) {
	if l == nil {
		return
	}
	if reload > 0 {
		at := l.restore[0].Path
		if len(l.steady) > 0 {
			at = l.steady[0].Path // the pause syncs its dir: the configs' renames land first
		}
		wait := switchWaits * reload
		p.add(Step{Path: at, Action: fmt.Sprintf("wait %s for the runtimes to read the routed configs, and the calls under way to end", wait), pause: wait})
	}
	p.Steps = append(p.Steps, l.restore...)
	p.Steps = append(p.Steps, l.steady...)
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
	cur, err := bounded.Read(path, bounded.Small)
	if err != nil {
		return false, fmt.Errorf("reading %w", err)
	}
	steady, moving := routedForms(path)
	return steady != nil && (bytes.Equal(cur, steady) || bytes.Equal(cur, moving)), nil
}

// routedForms are what install makes of the original kept for path: its
// steady form, and the form a switch from takeover writes first (nil,
// nil when the original does not read).
func routedForms(path string) (steady, moving []byte) {
	orig := cninode.ReadConf(backupPath(path))
	if orig.Err != nil {
		return nil, nil
	}
	steady, err := routeThroughSafeIPAM(orig)
	if err != nil {
		return nil, nil
	}
	if moving, err = routeWhileLeavingTakeover(orig); err != nil {
		return nil, nil
	}
	return steady, moving
}

// steadyAgain plans the steady form of a config a switch from takeover
// left in its first form (the run was cut short, in its pause or after):
// at once when calico-ipam is Calico's again (l nil), else once it is.
func (l *leaving) steadyAgain(p *Plan, c *cninode.Conf) {
	steady, moving := routedForms(c.Path)
	if moving == nil || !bytes.Equal(c.Raw, moving) {
		return
	}
	s := writeStep("route calico-ipam through safe-ipam in its steady form (a switch from takeover was cut short)", c.Path, steady, c.Perm)
	if l == nil {
		p.add(s)
		return
	}
	l.steady = append(l.steady, s)
}
