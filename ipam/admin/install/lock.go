package install

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// ErrLocked means another install, uninstall or watch is changing the
// node right now.
var ErrLocked = errors.New("another safe-ipam install is changing this node")

// lock takes the node's lock: an flock on the conf dir itself, so that
// no lock file is left in a directory uninstall must restore byte for
// byte. It does not wait: two installs at once are an operator's mistake
// to report, and the watch loop retries on its own.
func (n Node) lock() (unlock func(), err error) {
	d, err := bounded.OpenDir(n.ConfDir)
	if err != nil {
		return nil, fmt.Errorf("--cni-conf-dir: %w", err)
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		d.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (lock on %s held)", ErrLocked, n.ConfDir)
		}
		return nil, fmt.Errorf("locking %s: %w", n.ConfDir, err)
	}
	return func() { d.Close() }, nil
}

// ErrWatched means a watch (install --watch, as the DaemonSet runs it)
// keeps safe-ipam on this node: an uninstall would be undone within
// moments, so it is refused until the watch stops.
var ErrWatched = errors.New("a watch (safe-ipam install --watch, as the DaemonSet runs it) keeps safe-ipam on this node: stop it first (delete the DaemonSet, or stop the process), then uninstall")

// holdWatched marks the node watched for as long as the watch runs: a
// shared flock on the bin dir (the conf dir's lock is install's own, and
// no file may be left in either). Several watches may hold it; it waits
// while an uninstall runs.
func (n Node) holdWatched() (release func(), err error) {
	return flockDir(n.BinDir, "--cni-bin-dir", syscall.LOCK_SH)
}

// notWatched holds the bin dir exclusively for an uninstall, refusing
// with ErrWatched while a watch holds it; a watch that starts meanwhile
// waits for the uninstall to end.
func (n Node) notWatched() (release func(), err error) {
	release, err = flockDir(n.BinDir, "--cni-bin-dir", syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, ErrWatched
	}
	return release, err
}

func flockDir(dir, flag string, how int) (func(), error) {
	d, err := bounded.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := syscall.Flock(int(d.Fd()), how); err != nil {
		d.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { d.Close() }, nil
}

// Result is what one install or uninstall did.
type Result struct {
	Mode  string
	Plan  *Plan
	Notes []string
	// Applied is false for a dry run.
	Applied bool
}

// Install puts safe-ipam on the node in mode m, all or nothing, under the
// node's lock. With dryRun it only plans.
func Install(n Node, m Mode, self string, dryRun bool) (*Result, error) {
	return InstallWith(n, m, self, nil, dryRun)
}

// InstallWith is Install that also writes the node settings s (nil:
// leaves them as they are).
//
// The CNI binary it puts on the node is self, unless the node's configs
// keep records in etcd: then it is the etcd build beside self. The lean
// build would hand each of those calls to it, one more exec per call; the
// etcd build runs them itself and any other call too. Both are on the
// node either way, so a config changed before the watch re-installs still
// works.
func InstallWith(n Node, m Mode, self string, s Settings, dryRun bool) (*Result, error) {
	return locked(n, dryRun, func() (*Plan, []string, error) {
		p, etcd, err := n.planChecked(m, self, s)
		if err == nil && etcd {
			p, _, err = n.planChecked(m, etcdBuildBeside(self), s)
		}
		if err != nil {
			return nil, nil, err
		}
		n.planCancelUninstall(p)
		return p, nil, nil
	}, m.Name())
}

// planCancelUninstall cancels an uninstall that could not forget every
// record (cninode.PendingForgetFile), which doctor reports as half
// uninstalled. safe-ipam goes back in front of calico-ipam, so the
// records that uninstall meant to forget stay and fence their addresses
// again: forgetting them now would unfence running pods. A file that
// cannot be read is cancelled all the same: only uninstall reads it, and
// it would finish forgetting under an installed safe-ipam.
func (n Node) planCancelUninstall(p *Plan) {
	path := filepath.Join(n.BinDir, cninode.PendingForgetFile)
	left, err := cninode.ReadPendingForget(n.BinDir)
	if left == nil && err == nil {
		return
	}
	what := "an unfinished uninstall"
	if left != nil {
		var nets []string
		for _, q := range left.Networks {
			nets = append(nets, q.Network)
		}
		what += " of network(s) " + strings.Join(nets, ", ")
	}
	p.add(removeStep("cancel "+what+": safe-ipam is in place again, so the records it was to forget stay and fence their addresses (safe-ipam uninstall takes it off)", path))
}

// etcdBuildBeside is the CNI binary's etcd build in self's directory.
func etcdBuildBeside(self string) string { return filepath.Join(filepath.Dir(self), builds.EtcdBinary) }

// planChecked plans m's install of the CNI binary self with the node
// settings s, and refuses it when the plugin would refuse a config it
// leaves (checkConfigs); etcd says whether any of them keeps its records
// in etcd.
func (n Node) planChecked(m Mode, self string, s Settings) (p *Plan, etcd bool, err error) {
	if p, err = m.Install(n, self); err != nil {
		return nil, false, err
	}
	if p.onlyRemoves() {
		return p, false, nil // it puts nothing in front of calico-ipam
	}
	confs, err := calicoConfs(n, true)
	if err != nil {
		return nil, false, err
	}
	if s, err = withCalicoEtcd(s, confs); err != nil {
		return nil, false, err
	}
	settings, err := n.planSettings(p, s)
	if err != nil {
		return nil, false, err
	}
	etcd, err = n.checkConfigs(p, m, append(confs, n.ownConflistAfter(p)...), settings)
	return p, etcd, err
}

// ownConflistAfter is safe-ipam's own config once p lands, if any: the
// runtime reads it first, so the plugin must take it too.
func (n Node) ownConflistAfter(p *Plan) []*cninode.Conf {
	own := n.conf(cninode.OwnConflist)
	if p.removes(own) {
		return nil
	}
	c := cninode.ReadConf(own)
	if data := p.content(own, nil); data != nil {
		c = &cninode.Conf{Path: own, Raw: data}
	}
	if c.Raw == nil {
		return nil
	}
	return []*cninode.Conf{c}
}

// Uninstall takes safe-ipam off the node in mode m. It refuses while a
// watch keeps safe-ipam there (ErrWatched), dry run included: the plan
// would not hold.
func Uninstall(n Node, m Mode, dryRun bool) (*Result, error) {
	release, err := n.notWatched()
	if err != nil {
		return nil, err
	}
	defer release()
	return locked(n, dryRun, func() (*Plan, []string, error) {
		p, notes, err := m.Uninstall(n)
		if err == nil {
			n.planForgetSettings(p)
		}
		return p, notes, err
	}, m.Name())
}

func locked(n Node, dryRun bool, plan func() (*Plan, []string, error), mode string) (*Result, error) {
	unlock, err := n.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !dryRun {
		if err := n.removeStale(); err != nil {
			return nil, fmt.Errorf("removing what a killed install staged: %w", err)
		}
	}
	p, notes, err := plan()
	if err != nil {
		return nil, err
	}
	r := &Result{Mode: mode, Plan: p, Notes: notes}
	if dryRun || p.Empty() {
		return r, nil
	}
	if err := p.Apply(); err != nil {
		return nil, fmt.Errorf("%w: %v%s", ErrRefused, err, n.readOnlyHint(p, err))
	}
	r.Applied = true
	return r, nil
}

// readOnlyHint says, when a plan failed on a read-only conf dir, which
// mount must be writable: the conflist modes' changes land there, in
// install's DaemonSet and in uninstall's alike.
func (n Node) readOnlyHint(p *Plan, err error) string {
	if !errors.Is(err, syscall.EROFS) {
		return ""
	}
	for _, s := range p.Steps {
		if filepath.Dir(s.Path) == filepath.Clean(n.ConfDir) {
			return fmt.Sprintf("; the conflist modes write %s: mount it writable (readOnly: false on the cni-net-dir mount of deploy/safe-ipam.yaml's install and watch containers, and of deploy/safe-ipam-uninstall.yaml's uninstall container; go run ./deploy/render/cmd --mode <mode> renders them so)", n.ConfDir)
		}
	}
	return ""
}
