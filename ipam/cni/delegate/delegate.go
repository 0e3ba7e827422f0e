// Package delegate runs the IPAM plugin safe-ipam fronts, with an
// explicit environment per call, in the CNI version both sides speak.
package delegate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// ErrMissing means the delegate binary is not where it was looked for.
var ErrMissing = errors.New("delegate binary not found")

// ErrOutsideCNIPath means the config names a delegate file outside
// CNI_PATH, and the node's settings do not allow it
// (delegateOutsideCNIPath).
var ErrOutsideCNIPath = errors.New("delegate outside CNI_PATH")

// Delegate is a resolved delegate binary.
type Delegate struct {
	Type string
	Path string
	// Argv0 is the name it runs under: <dir of Path>/<Type>. A multi-call
	// binary such as Calico's picks its role from it.
	Argv0    string
	Versions []string // as its VERSION answer declares
}

// Target says which file runs as the delegate and under which name.
type Target struct {
	// Type is the plugin name, the base of argv[0].
	Type string
	// BinDir, when set, is the only directory searched.
	BinDir string
	// Binary is the file when it is not named Type: a bare name searched
	// like Type, or an absolute path.
	Binary string
	// OutsideCNIPath allows BinDir or an absolute Binary outside CNI_PATH.
	OutsideCNIPath bool
}

// TargetOf is the delegate a network config names.
func TargetOf(d config.Delegate) Target {
	return Target{Type: d.Type, BinDir: d.BinDir, Binary: d.Binary, OutsideCNIPath: d.OutsideCNIPath}
}

func (t Target) file() string {
	if t.Binary != "" {
		return t.Binary
	}
	return t.Type
}

// Env is the CNI environment of one call: the runtime's call of
// safe-ipam, and safe-ipam's of its delegate (with CNI_ARGS rewritten).
// The verb is not part of it: a call runs one.
type Env struct {
	ContainerID string
	NetNS       string
	IfName      string
	Args        string // CNI_ARGS
	Path        string // CNI_PATH
}

// find resolves the target's file in binDir when set (so the real binary can live
// outside CNI_PATH), else in CNI_PATH, and refuses to resolve to the
// running binary itself. It returns the binary's file info, which keys
// the version cache, so ADD and DEL stat it once.
func find(t Target, cniPath string) (string, os.FileInfo, error) {
	path, err := locate(t, cniPath)
	if err != nil {
		return "", nil, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrMissing, err)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", nil, fmt.Errorf("%w: %s is not an executable file", ErrMissing, path)
	}
	if isSelf(info) {
		return "", nil, fmt.Errorf("delegate %q resolves to safe-ipam itself (%s); set ipam.delegate.binDir to the real plugin's directory or ipam.delegate.binary to its file", t.Type, path)
	}
	return path, info, nil
}

func locate(t Target, cniPath string) (string, error) {
	if filepath.IsAbs(t.Binary) {
		return t.Binary, t.confined(filepath.Dir(t.Binary), "ipam.delegate.binary", cniPath)
	}
	dirs := filepath.SplitList(cniPath)
	if t.BinDir != "" {
		if err := t.confined(t.BinDir, "ipam.delegate.binDir", cniPath); err != nil {
			return "", err
		}
		dirs = []string{t.BinDir}
	}
	path, err := invoke.FindInPath(t.file(), dirs)
	if err != nil {
		return "", fmt.Errorf("%w: %q in %s", ErrMissing, t.file(), strings.Join(dirs, ":"))
	}
	return path, nil
}

// confined refuses dir, named by setting, unless it is, by name, one of
// CNI_PATH's directories (a directory that only leads there, through a
// symbolic link, could be flipped elsewhere between the check and the
// exec), or the node allows any (see config.Delegate): then no symbolic
// link may lie on its path, for the same reason.
func (t Target) confined(dir, setting, cniPath string) error {
	if t.OutsideCNIPath {
		if link := linkOnPath(dir); link != "" {
			return fmt.Errorf("%w: %s names %s, and %s on its path is a symbolic link: the file checked must be the file that runs", ErrOutsideCNIPath, setting, dir, link)
		}
		return nil
	}
	for _, d := range filepath.SplitList(cniPath) {
		if filepath.Clean(d) == filepath.Clean(dir) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s names %s, which is not in CNI_PATH (%s); only the node may allow that: safe-ipam install --delegate-outside-cni-path", ErrOutsideCNIPath, setting, dir, cniPath)
}

// linkOnPath is the first symbolic link on the absolute path dir ("" for
// none; a part that cannot be read counts as one: nothing vouches for it).
func linkOnPath(dir string) string {
	at := "/"
	for _, part := range strings.Split(strings.TrimPrefix(filepath.Clean(dir), "/"), "/") {
		if part == "" {
			continue
		}
		at = filepath.Join(at, part)
		if st, err := os.Lstat(at); err != nil || st.Mode()&os.ModeSymlink != 0 {
			return at
		}
	}
	return ""
}

func isSelf(info os.FileInfo) bool {
	self, err := os.Executable()
	if err != nil {
		return false
	}
	for _, path := range []string{self, os.Getenv(builds.HandedOverEnv)} {
		if path == "" {
			continue
		}
		if st, err := os.Stat(path); err == nil && os.SameFile(st, info) {
			return true
		}
	}
	return false
}

// Negotiate picks the version to speak with the delegate: the requested
// one if the delegate has it, else the highest it has below it.
func Negotiate(requested string, supported []string) (string, error) {
	best := ""
	for _, v := range supported {
		le, err := version.GreaterThanOrEqualTo(requested, v)
		if err != nil || !le {
			continue
		}
		if best == "" {
			best = v
		} else if gt, _ := version.GreaterThan(v, best); gt {
			best = v
		}
	}
	if best == "" {
		return "", fmt.Errorf("delegate supports none of the CNI versions up to %s (it has %s)", requested, strings.Join(supported, ", "))
	}
	return best, nil
}

// Speaks says whether the delegate declares version v.
func (d *Delegate) Speaks(v string) bool {
	for _, s := range d.Versions {
		if s == v {
			return true
		}
	}
	return false
}

// Add runs the delegate's ADD and returns its result as it printed it.
func (d *Delegate) Add(ctx context.Context, conf []byte, env Env) (types.Result, error) {
	defer traceExec(ctx)()
	return invoke.ExecPluginWithResult(ctx, d.Path, conf, env.args("ADD"), newExec(d.Argv0))
}

// Run runs a verb without a result: DEL, CHECK, GC or STATUS.
func (d *Delegate) Run(ctx context.Context, command string, conf []byte, env Env) error {
	defer traceExec(ctx)()
	return invoke.ExecPluginWithoutResult(ctx, d.Path, conf, env.args(command), newExec(d.Argv0))
}

// traceExec marks the start of a delegate exec in the call's trace, if
// any, and returns what marks its end.
func traceExec(ctx context.Context) func() {
	t := logging.TraceFrom(ctx)
	t.Mark(logging.MarkDelegateStart)
	return func() { t.Mark(logging.MarkDelegateEnd) }
}

func (e Env) args(command string) *invoke.Args {
	return &invoke.Args{
		Command:       command,
		ContainerID:   e.ContainerID,
		NetNS:         e.NetNS,
		PluginArgsStr: e.Args,
		IfName:        e.IfName,
		Path:          e.Path,
	}
}
