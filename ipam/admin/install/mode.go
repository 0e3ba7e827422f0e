package install

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// Mode is one way of putting safe-ipam in front of calico-ipam. Every
// mode passes one contract (mode_test.go): installing twice changes
// nothing the second time, uninstall restores every byte, and a refusal
// changes nothing.
type Mode interface {
	Name() string
	// Install plans what puts self, the safe-ipam binary, in front of
	// calico-ipam on n. An empty plan: it is there already.
	Install(n Node, self string) (*Plan, error)
	// Uninstall plans what puts n back as it was, and says what it
	// leaves as it is, and why.
	Uninstall(n Node) (*Plan, []string, error)
}

// Mode names.
const (
	ModeOwnConflist = "own-conflist"
	ModeConflist    = "conflist"
	ModeTakeover    = "takeover"
)

// ModeNames are the modes, in the order uninstall undoes them: safe-ipam's
// own config goes before anything it names.
var ModeNames = []string{ModeOwnConflist, ModeConflist, ModeTakeover}

// ModeNamed returns the mode called name.
func ModeNamed(name string) (Mode, error) {
	switch name {
	case ModeOwnConflist:
		return OwnConflistMode{}, nil
	case ModeConflist:
		return ConflistMode{}, nil
	case ModeTakeover:
		return TakeoverMode{}, nil
	}
	return nil, fmt.Errorf("--mode %q: want %q, %q or %q", name, ModeOwnConflist, ModeConflist, ModeTakeover)
}

// ErrRefused wraps every reason a mode gives for changing nothing.
var ErrRefused = errors.New("refused, nothing changed")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// calicoConfs reads the conf dir, but for safe-ipam's own config
// (own-conflist mode's, which names Calico's network). strict refuses a
// file that does not parse: it may be the Calico network left
// unprotected.
func calicoConfs(n Node, strict bool) ([]*cninode.Conf, error) {
	confs, err := cninode.ReadConfs(n.ConfDir)
	if err != nil {
		return nil, refuse("--cni-conf-dir %s: %v", n.ConfDir, err)
	}
	var calico []*cninode.Conf
	for _, c := range confs {
		if filepath.Base(c.Path) == cninode.OwnConflist {
			continue
		}
		if c.Err != nil {
			if strict {
				return nil, refuse("%v; it is left untouched, fix or remove it", c.Err)
			}
			continue
		}
		if c.IsCalico() {
			calico = append(calico, c)
		}
	}
	if len(calico) == 0 {
		return nil, refuse("no network config in %s uses calico-ipam: is Calico installed on this node?", n.ConfDir)
	}
	return calico, nil
}

func requireFile(path, what string) error {
	st, err := os.Stat(path)
	if err != nil {
		return refuse("%s (%s) is missing: %s", path, what, strings.TrimPrefix(err.Error(), "stat "+path+": "))
	}
	if !st.Mode().IsRegular() {
		return refuse("%s (%s) is not a regular file", path, what)
	}
	return nil
}

// installBuilds plans putting the CNI binary self at path, and its etcd
// build (beside self) beside it in the bin dir, first: a node whose CNI
// binary hands calls over etcd must never lack the build it hands them
// to, on its first install or when upgraded from a release that had none.
func installBuilds(p *Plan, n Node, path, self string) error {
	etcd := etcdBuildBeside(self)
	if err := requireFile(etcd, "the CNI binary's build with the etcd client, which install puts beside it"); err != nil {
		return err
	}
	if err := installBinary(p, n.bin(builds.EtcdBinary), etcd); err != nil {
		return err
	}
	return installBinary(p, path, self)
}

// uninstallEtcdBuild plans taking the etcd build off the node, after the
// CNI binary that hands calls to it (the plan's steps run in order). While
// p leaves a safe-ipam CNI binary on the node, in either mode's place (the
// other mode's install, or one this uninstall keeps), the etcd build stays
// with it: that binary may hand it calls.
func uninstallEtcdBuild(p *Plan, n Node) ([]string, error) {
	for _, cni := range []string{n.bin(builds.CNIBinary), n.bin(CalicoIPAM)} {
		ours, err := cninode.IsSafeIPAM(cni)
		if err != nil || (ours && !p.removes(cni) && !p.restores(cni)) {
			return nil, err
		}
	}
	path := n.bin(builds.EtcdBinary)
	return uninstallFile(p, path, func() (bool, error) { return cninode.IsSafeIPAM(path) })
}

// installBinary plans putting self at path, keeping what was there.
func installBinary(p *Plan, path, self string) error {
	same, err := sameContent(self, path)
	if err != nil {
		return refuse("comparing %s with %s: %v", path, self, err)
	}
	if same {
		return requireSum(path)
	}
	ours, err := cninode.IsSafeIPAM(path)
	if err != nil {
		return refuse("%v", err)
	}
	_, statErr := os.Stat(path)
	switch {
	case ours && (exists(backupPath(path)) || exists(absentPath(path))):
		// Another build of safe-ipam that an earlier install put there:
		// the original it kept stays the one to restore.
		if err := requireSum(path); err != nil {
			return err
		}
	case statErr == nil:
		// Whatever is there now (a newer Calico, after its installer ran)
		// is what uninstall must bring back.
		if err := keepOriginal(p, path); err != nil {
			return err
		}
		if exists(absentPath(path)) {
			p.add(removeStep("drop the record", absentPath(path)))
		}
	case errors.Is(statErr, os.ErrNotExist):
		if !exists(absentPath(path)) {
			p.add(absentStep(path))
		}
	default:
		return refuse("%v", statErr)
	}
	p.add(copyStep("install safe-ipam", path, self, 0o755))
	return nil
}

// uninstallFile plans putting path back as install found it, if it is
// still what install put there (ours); otherwise it only drops the backup.
func uninstallFile(p *Plan, path string, ours func() (bool, error)) ([]string, error) {
	orig, absent := exists(backupPath(path)), exists(absentPath(path))
	if !orig && !absent {
		if exists(sumPath(path)) {
			// A restore cut short between its rename and this.
			p.add(removeStep("drop the original's SHA-256, left by a restore cut short", sumPath(path)))
		}
		return nil, nil
	}
	var notes []string
	if orig {
		// Before judging by it (a conflist is ours when it is what install
		// made of the original) and before restoring it.
		if why := checkOriginal(path); why != "" {
			return nil, fmt.Errorf("%s is left as it is, and so is %s: %s; put the original back by hand (reinstalling Calico's CNI does), then remove %s", path, backupPath(path), why, backupPath(path))
		}
	}
	mine, err := ours()
	if err != nil {
		return nil, err
	}
	switch {
	case mine && orig:
		p.add(restoreStep(path))
	case mine && absent:
		p.add(removeStep("remove what install added", path))
	default:
		notes = append(notes, fmt.Sprintf("%s changed since install (by Calico's installer or by hand): kept as it is", path))
	}
	if orig && !mine {
		p.add(removeStep("drop the kept original", backupPath(path)))
	}
	if exists(sumPath(path)) {
		p.add(removeStep("drop the original's SHA-256", sumPath(path)))
	}
	if absent {
		p.add(removeStep("drop the record", absentPath(path)))
	}
	return notes, nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// sameContent says whether two files hold the same bytes.
func sameContent(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil || sa.Size() != sb.Size() {
		return false, err
	}
	// Chunk by chunk: the two are binaries of tens of MiB, and the
	// watch runs under a memory limit.
	fa, err := bounded.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := bounded.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ca, cb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, errA := io.ReadFull(fa, ca)
		nb, errB := io.ReadFull(fb, cb)
		if na != nb || !bytes.Equal(ca[:na], cb[:nb]) {
			return false, nil
		}
		switch {
		case errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF):
			return errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF), nil
		case errA != nil:
			return false, errA
		case errB != nil:
			return false, errB
		}
	}
}
