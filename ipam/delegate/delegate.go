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
)

// ErrMissing means the delegate binary is not where it was looked for.
var ErrMissing = errors.New("delegate binary not found")

// Delegate is a resolved delegate binary.
type Delegate struct {
	Type     string
	Path     string
	Versions []string // as its VERSION answer declares
}

// Call is the CNI environment of one delegate call.
type Call struct {
	Command     string
	ContainerID string
	NetNS       string
	IfName      string
	Args        string // CNI_ARGS, already rewritten
	Path        string // CNI_PATH
}

// find resolves typ in binDir when set (so the real binary can live
// outside CNI_PATH), else in CNI_PATH, and refuses to resolve to the
// running binary itself. It returns the binary's file info, which keys
// the version cache, so ADD and DEL stat it once.
func find(typ, binDir, cniPath string) (string, os.FileInfo, error) {
	dirs := filepath.SplitList(cniPath)
	if binDir != "" {
		dirs = []string{binDir}
	}
	path, err := invoke.FindInPath(typ, dirs)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %q in %s", ErrMissing, typ, strings.Join(dirs, ":"))
	}
	info, err := os.Stat(path)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrMissing, err)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", nil, fmt.Errorf("%w: %s is not an executable file", ErrMissing, path)
	}
	if isSelf(info) {
		return "", nil, fmt.Errorf("delegate %q resolves to safe-ipam itself (%s); set ipam.delegate.binDir to the real plugin's directory", typ, path)
	}
	return path, info, nil
}

func isSelf(info os.FileInfo) bool {
	self, err := os.Executable()
	if err != nil {
		return false
	}
	selfInfo, err := os.Stat(self)
	return err == nil && os.SameFile(selfInfo, info)
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
func (d *Delegate) Add(ctx context.Context, conf []byte, call Call) (types.Result, error) {
	call.Command = "ADD"
	return invoke.ExecPluginWithResult(ctx, d.Path, conf, call.args(), nil)
}

// Run runs a verb without a result: DEL, CHECK, GC or STATUS.
func (d *Delegate) Run(ctx context.Context, command string, conf []byte, call Call) error {
	call.Command = command
	return invoke.ExecPluginWithoutResult(ctx, d.Path, conf, call.args(), nil)
}

func (c Call) args() *invoke.Args {
	return &invoke.Args{
		Command:       c.Command,
		ContainerID:   c.ContainerID,
		NetNS:         c.NetNS,
		PluginArgsStr: c.Args,
		IfName:        c.IfName,
		Path:          c.Path,
	}
}
