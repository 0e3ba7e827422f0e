package install

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// OwnConflistMode writes a network config of safe-ipam's own,
// <conf>/00-safe-ipam.conflist: Calico's config as the runtime would read
// it, every byte kept but its IPAM through safe-ipam with calico-ipam as
// the delegate. It sorts first, so the runtime reads it and not Calico's,
// which stays as Calico's installer wrote it; safe-ipam is
// <bin>/safe-ipam. Calico's installer writes only its own names, so a
// calico-node restart undoes nothing: there is no window in which calls
// reach calico-ipam alone. The watch renders the file again when Calico's
// changes, and removes it when Calico's goes (it would name a network
// Calico no longer runs) or when it hides another CNI's config, which now
// sorts first among the others (the runtime would read that one without
// safe-ipam).
//
// It applies where Calico's config is the one the runtime reads first; it
// refuses, changing nothing, where another config sorts before Calico's
// (Multus, Cilium's chaining: use takeover there), and where Calico's
// sorts before safe-ipam's or is a single-plugin .conf; installed, it then
// keeps safe-ipam's config, which hides only Calico's own network.
type OwnConflistMode struct {
	// SwitchFromTakeover: as ConflistMode's.
	SwitchFromTakeover bool
}

func (OwnConflistMode) Name() string { return ModeOwnConflist }

// errCalicoGone is a node without Calico's network config.
var errCalicoGone = errors.New("Calico's network config is gone")

// errDoesNotApply is a conf dir where safe-ipam's own config, installed,
// would hide another CNI's config, the first of the others.
var errDoesNotApply = errors.New("--mode=own-conflist does not apply")

func doesNotApply(format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrRefused, errDoesNotApply, fmt.Sprintf(format, args...))
}

func (m OwnConflistMode) Install(n Node, self string) (*Plan, error) {
	if err := n.checkDirs(); err != nil {
		return nil, refuse("%v", err)
	}
	own := n.conf(cninode.OwnConflist)
	src, err := n.firstCalicoConf()
	if errors.Is(err, errCalicoGone) || errors.Is(err, errDoesNotApply) {
		// Kept, safe-ipam's config would go on standing in place of what
		// the runtime would read without it: a new CNI's config, or none.
		return n.removeOwnConflist(err)
	}
	if err != nil {
		return nil, err // a config that does not parse: maybe Calico's, half written; tried again
	}
	p, l, err := n.planSafeIPAMBinary(ModeOwnConflist, self, m.SwitchFromTakeover)
	if err != nil {
		return nil, err
	}
	rendered, err := routeThroughSafeIPAM(src)
	if err != nil {
		return nil, refuse("%v", err)
	}
	cur := cninode.ReadConf(own)
	switch {
	case !exists(own):
		if !exists(absentPath(own)) {
			p.add(absentStep(own))
		}
		err = l.route(p, "write safe-ipam's network config, "+filepath.Base(src.Path)+" with its IPAM through safe-ipam, sorted first", src, own, src.Perm)
	case l == nil && bytes.Equal(cur.Raw, rendered) && cur.Perm == src.Perm:
	case cur.Err == nil && namesSafeIPAM(cur):
		err = l.route(p, "render safe-ipam's network config again from "+filepath.Base(src.Path), src, own, src.Perm)
	default:
		return nil, refuse("%s is not a network config safe-ipam wrote (it names no safe-ipam IPAM): move it away, or use --mode=conflist or takeover", own)
	}
	if err != nil {
		return nil, err
	}
	l.finish(p, n.ReloadWait)
	return p, nil
}

// firstCalicoConf is the config the runtime reads first, but for
// safe-ipam's own: Calico's, with calico-ipam as its IPAM, sorting after
// safe-ipam's. Anything else refuses, but a conf dir with no Calico config
// at all (errCalicoGone).
func (n Node) firstCalicoConf() (*cninode.Conf, error) {
	confs, err := cninode.ReadConfs(n.ConfDir)
	if err != nil {
		return nil, refuse("--cni-conf-dir %s: %v", n.ConfDir, err)
	}
	var first *cninode.Conf
	calico := false
	for _, c := range confs {
		if filepath.Base(c.Path) == cninode.OwnConflist {
			continue
		}
		if c.Err != nil {
			return nil, refuse("%v; it is left untouched, fix or remove it", c.Err)
		}
		if first == nil {
			first = c
		}
		calico = calico || c.IsCalico()
	}
	switch {
	case !calico:
		return nil, errCalicoGone
	case !first.IsCalico() && filepath.Base(first.Path) > cninode.OwnConflist:
		// safe-ipam's config, installed, would hide it.
		return nil, doesNotApply("the runtime reads %s first, not Calico's network config: --mode=own-conflist applies where Calico's is the first (use --mode=takeover)", first.Path)
	case !first.IsCalico():
		return nil, refuse("the runtime reads %s first, not Calico's network config: --mode=own-conflist applies where Calico's is the first (use --mode=takeover)", first.Path)
	case !needsRoute(first):
		return nil, refuse("%s routes its IPAM through safe-ipam (conflist mode): to switch, run safe-ipam uninstall, then install --mode=own-conflist (docs/install.md, \"Switching modes\")", first.Path)
	case filepath.Base(first.Path) < cninode.OwnConflist:
		return nil, refuse("%s sorts before %s, so the runtime would still read Calico's: use --mode=conflist or takeover", first.Path, cninode.OwnConflist)
	case !first.IsList():
		return nil, refuse("%s is a single-plugin .conf: --mode=own-conflist renders a conflist from a conflist (use --mode=conflist or takeover)", first.Path)
	}
	return first, nil
}

// removeOwnConflist plans taking safe-ipam's config off once it no longer
// stands in Calico's place (why): Calico's is gone, or another config
// sorts first. Kept, it would configure a network Calico no longer runs,
// or hide the config the runtime would read without safe-ipam. Without
// one to take off, the node is refused.
func (n Node) removeOwnConflist(why error) (*Plan, error) {
	own := n.conf(cninode.OwnConflist)
	ours, err := ownConflistOurs(own)
	if err != nil {
		return nil, refuse("%v", err)
	}
	switch {
	case !ours && errors.Is(why, errCalicoGone):
		return nil, refuse("no network config in %s uses calico-ipam: is Calico installed on this node?", n.ConfDir)
	case !ours:
		return nil, why
	}
	p := &Plan{}
	p.add(removeStep(strings.TrimPrefix(why.Error(), ErrRefused.Error()+": ")+"; so safe-ipam's own config goes", own))
	if exists(absentPath(own)) {
		p.add(removeStep("drop the record", absentPath(own)))
	}
	return p, nil
}

// ownConflistOurs says whether path holds a config naming safe-ipam:
// what own-conflist mode wrote there (a config someone else put under
// the name is left alone).
func ownConflistOurs(path string) (bool, error) {
	c, err := readOwnConflist(path)
	return c != nil && c.Err == nil && namesSafeIPAM(c), err
}

// readOwnConflist reads path once: nil when nothing is there, an error
// when it cannot be read (a dangling symlink too: something is there),
// else the config (Err set when it does not parse).
func readOwnConflist(path string) (*cninode.Conf, error) {
	raw, err := bounded.Read(path, bounded.Small)
	if errors.Is(err, os.ErrNotExist) {
		if _, lerr := os.Lstat(path); errors.Is(lerr, os.ErrNotExist) {
			return nil, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return cninode.ParseConf(path, raw, 0), nil
}

// Uninstall takes safe-ipam's config off first, then, once the runtimes
// had Node.ReloadWait to read the conf dir again, the binaries: no
// runtime reads a config naming a binary that is gone.
func (OwnConflistMode) Uninstall(n Node) (*Plan, []string, error) {
	if err := n.checkDirs(); err != nil {
		return nil, nil, refuse("%v", err)
	}
	own := n.conf(cninode.OwnConflist)
	p := &Plan{}
	notes, err := uninstallFile(p, own, func() (bool, error) {
		// Install made this name: one that does not parse is ours too
		// (it sorts first and would fail every pod start).
		c, err := readOwnConflist(own)
		return c != nil && (c.Err != nil || namesSafeIPAM(c)), err
	})
	if err != nil {
		return nil, nil, refuse("%v", err)
	}
	if !p.removes(own) {
		// Not in place in this mode: the binary is conflist mode's, if
		// any, which uninstall undoes next.
		return p, notes, nil
	}
	if n.ReloadWait > 0 {
		p.add(Step{Path: own, Action: fmt.Sprintf("wait %s for the runtimes to read the conf dir again", n.ReloadWait), pause: n.ReloadWait})
	}
	files, err := cninode.ConfFiles(n.ConfDir)
	if err != nil {
		return nil, nil, refuse("%v", err)
	}
	more, err := n.uninstallSafeIPAMBinary(p, files)
	if err != nil {
		return nil, nil, err
	}
	return p, append(notes, more...), nil
}

// ownConflistInstalled refuses the other modes' install on a node where
// safe-ipam's own config is in place.
func (n Node) ownConflistInstalled(mode string) error {
	own := n.conf(cninode.OwnConflist)
	ours, err := ownConflistOurs(own)
	if err != nil {
		return refuse("%v", err)
	}
	if ours {
		return refuse("%s is safe-ipam's own network config (own-conflist mode): to switch, run safe-ipam uninstall, then install --mode=%s (docs/install.md, \"Switching modes\")", own, mode)
	}
	return nil
}
