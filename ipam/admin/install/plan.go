package install

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// Plan is the changes that bring a node into (or out of) a mode, in the
// order they must land. An empty plan means there is nothing to do.
type Plan struct {
	Steps []Step
}

// Step is one file change.
type Step struct {
	// Path is the file that changes.
	Path string
	// Action says what happens, for --dry-run and logs.
	Action string
	// Exactly one of these is set.
	data   []byte // new content
	from   string // copy this file's content (the safe-ipam binary)
	linkTo string // hard-link Path to this name (a backup of Path)
	rename string // rename this file over Path (a restore)
	remove bool
	pause  time.Duration // wait this long before the next step
	// perm, uid and gid of a written file.
	perm     os.FileMode
	uid, gid int

	staged string
}

func (p *Plan) add(s Step) { p.Steps = append(p.Steps, s) }

// removes says whether the plan removes path.
func (p *Plan) removes(path string) bool {
	return slices.ContainsFunc(p.Steps, func(s Step) bool { return s.Path == path && s.remove })
}

// restores says whether the plan puts the kept original back at path.
func (p *Plan) restores(path string) bool {
	return slices.ContainsFunc(p.Steps, func(s Step) bool { return s.Path == path && s.rename != "" })
}

// onlyRemoves says whether every step of a plan that has some removes a
// file.
func (p *Plan) onlyRemoves() bool {
	return !p.Empty() && !slices.ContainsFunc(p.Steps, func(s Step) bool { return !s.remove })
}

// Empty says whether the node is already as the plan wants it.
func (p *Plan) Empty() bool { return len(p.Steps) == 0 }

// Describe lists the steps, one per line.
func (p *Plan) Describe() []string {
	out := make([]string, 0, len(p.Steps))
	for _, s := range p.Steps {
		out = append(out, s.Action+": "+s.Path)
	}
	return out
}

// Apply makes every change or none. It first stages each one beside its
// target (a temp file, or a temp hard link); only when all are staged
// does it rename them into place, in order. A renaming within one
// directory does not fail for want of space or permission once the
// staging worked, so a refusal (a read-only directory, a full disk)
// leaves the node untouched.
func (p *Plan) Apply() error {
	for i := range p.Steps {
		if err := p.Steps[i].stage(); err != nil {
			p.discard()
			return fmt.Errorf("%s: cannot %s: %w", p.Steps[i].Path, p.Steps[i].Action, err)
		}
	}
	for i := range p.Steps {
		if err := p.Steps[i].commit(); err != nil {
			p.discard()
			return fmt.Errorf("%s: cannot %s, after %d of %d changes were made: %w", p.Steps[i].Path, p.Steps[i].Action, i, len(p.Steps), err)
		}
	}
	syncDirs(p.Steps)
	return nil
}

func (p *Plan) discard() {
	for _, s := range p.Steps {
		if s.staged != "" {
			os.Remove(s.staged)
		}
	}
}

func (s *Step) stage() error {
	dir := filepath.Dir(s.Path)
	switch {
	case s.pause > 0:
		return nil
	case s.data != nil || s.from != "":
		f, err := os.CreateTemp(dir, tempPrefix)
		if err != nil {
			return err
		}
		s.staged = f.Name()
		return s.fill(f)
	case s.linkTo != "":
		return s.stageLink(dir)
	default:
		// A rename or removal stages nothing, but must not be the one
		// change that fails: prove the directory takes changes.
		return probe(dir)
	}
}

func (s *Step) fill(f *os.File) error {
	err := s.write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *Step) write(f *os.File) error {
	if s.from != "" {
		src, err := bounded.Open(s.from)
		if err != nil {
			return err
		}
		defer src.Close()
		n, err := io.Copy(f, io.LimitReader(src, bounded.Binary+1))
		if err != nil {
			return err
		}
		if n > bounded.Binary {
			return fmt.Errorf("%s: %w (%d bytes)", s.from, bounded.ErrTooLarge, bounded.Binary)
		}
	} else if _, err := f.Write(s.data); err != nil {
		return err
	}
	if err := f.Chmod(s.perm); err != nil {
		return err
	}
	if err := f.Chown(s.uid, s.gid); err != nil && !errors.Is(err, syscall.EPERM) {
		return err
	}
	return f.Sync()
}

// stageLink hard-links the file at Path under a temp name; the commit
// renames that over the backup name, so an older backup is replaced at
// once, never removed first.
func (s *Step) stageLink(dir string) error {
	for i := 0; ; i++ {
		name := filepath.Join(dir, fmt.Sprintf("%s%d-%d", tempPrefix, os.Getpid(), i))
		err := os.Link(s.Path, name)
		if err == nil {
			s.staged = name
			return nil
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return err
		}
	}
}

func probe(dir string) error {
	f, err := os.CreateTemp(dir, tempPrefix)
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

func (s *Step) commit() error {
	var err error
	switch {
	case s.linkTo != "":
		err = os.Rename(s.staged, s.linkTo)
	case s.staged != "":
		err = os.Rename(s.staged, s.Path)
	case s.rename != "":
		err = os.Rename(s.rename, s.Path)
	case s.remove:
		err = os.Remove(s.Path)
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	case s.pause > 0:
		syncDirs([]Step{*s}) // what the pause orders first is on disk first
		time.Sleep(s.pause)
	}
	if err == nil {
		s.staged = ""
	}
	return err
}

// syncDirs makes the renames durable; a failure here loses nothing that
// a re-run would not redo.
func syncDirs(steps []Step) {
	seen := map[string]bool{}
	for _, s := range steps {
		dir := filepath.Dir(s.Path)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if d, err := bounded.OpenDir(dir); err == nil {
			_ = d.Sync()
			d.Close()
		}
	}
}

// writeStep replaces path with data, keeping the mode and owner of the
// file it replaces (or perm for a new file).
func writeStep(action, path string, data []byte, perm os.FileMode) Step {
	s := Step{Path: path, Action: action, data: data, perm: perm, uid: os.Getuid(), gid: os.Getgid()}
	keepOwner(&s)
	return s
}

// copyStep is writeStep with the content of the file from.
func copyStep(action, path, from string, perm os.FileMode) Step {
	s := Step{Path: path, Action: action, from: from, perm: perm, uid: os.Getuid(), gid: os.Getgid()}
	keepOwner(&s)
	return s
}

func keepOwner(s *Step) {
	st, err := os.Stat(s.Path)
	if err != nil {
		return
	}
	s.perm = st.Mode().Perm()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.uid, s.gid = int(sys.Uid), int(sys.Gid)
	}
}

// keepOriginal plans keeping the file at path, as it is, for uninstall:
// a hard link to it, and its SHA-256, by which uninstall knows that what
// it restores is that file.
func keepOriginal(p *Plan, path string) error {
	sum, err := fileSum(path)
	if err != nil {
		return refuse("%v", err)
	}
	p.add(Step{Path: path, Action: "keep the original for uninstall", linkTo: backupPath(path)})
	p.add(Step{Path: sumPath(path), Action: "record the original's SHA-256 for uninstall", data: []byte(sum + "\n"), perm: 0o600})
	return nil
}

// fileSum is the hex SHA-256 of the regular file at path (never of what
// a symlink there names).
func fileSum(path string) (string, error) {
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file (%s)", path, st.Mode().Type())
	}
	f, err := bounded.OpenNoFollow(path)
	if err != nil {
		return "", fmt.Errorf("reading %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if n, err := io.Copy(h, io.LimitReader(f, bounded.Binary+1)); err != nil || n > bounded.Binary {
		return "", fmt.Errorf("reading %s: %w", path, cmp.Or(err, bounded.ErrTooLarge))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkOriginal says why the backup of path is not the file install
// kept, or "" when it is: a regular file (not a symlink) whose SHA-256
// is the one install recorded. A backup with no recorded SHA-256 is
// refused: install writes one with every backup it keeps, so a missing
// sum means it was removed (or an older safe-ipam kept the backup), and
// nothing vouches for the file any more.
func checkOriginal(path string) string {
	sum, err := fileSum(backupPath(path))
	if err != nil {
		return err.Error()
	}
	recorded, err := bounded.Read(sumPath(path), bounded.Small)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return unvouched(path, "uninstall")
	case err != nil:
		return fmt.Sprintf("reading %v", err)
	case strings.TrimSpace(string(recorded)) != sum:
		return fmt.Sprintf("%s is not the file install kept (its SHA-256 differs from %s)", backupPath(path), sumPath(path))
	}
	return ""
}

// requireSum refuses an install over a backup of path with no recorded
// SHA-256: install never vouches for a file it did not write. Recording
// the sum of whatever is there now (every DaemonSet start runs install)
// would launder a backup swapped after its sum was removed; an older
// safe-ipam's backup is vouched for by the operator, once.
func requireSum(path string) error {
	if !exists(backupPath(path)) || exists(sumPath(path)) {
		return nil
	}
	return refuse("%s", unvouched(path, "install"))
}

// unvouched says that nothing vouches for the backup of path, and how the
// operator does before running again.
func unvouched(path, again string) string {
	return fmt.Sprintf("no SHA-256 of %s is recorded in %s, so nothing shows it is the file install kept; if it is Calico's (compare it with Calico's release), record its sum (sha256sum %s | cut -d' ' -f1 > %s) and run %s again",
		backupPath(path), sumPath(path), backupPath(path), sumPath(path), again)
}

// absentStep records that path did not exist, for uninstall.
func absentStep(path string) Step {
	return Step{Path: absentPath(path), Action: "record for uninstall that this did not exist", data: []byte{}, perm: 0o600}
}

func restoreStep(path string) Step {
	return Step{Path: path, Action: "restore the original", rename: backupPath(path)}
}

func removeStep(action, path string) Step {
	return Step{Path: path, Action: action, remove: true}
}
