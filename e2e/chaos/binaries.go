package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/about"
)

// Program names in a CNI_PATH the chaos suite builds.
const (
	SafeIPAM   = about.CNIBinary
	CalicoIPAM = "calico-ipam"
)

const (
	module        = "github.com/safe-ipam/safe-ipam"
	pluginPkg     = "./plugin/safe-ipam"
	adminPkg      = "./plugin/safe-ipam-admin"
	simulatorPkg  = module + "/e2e/cmd/calico-ipam"
	crashpointTag = "crashpoints"
)

// Binaries is a directory used as CNI_PATH: safe-ipam built with crash
// points, and the calico-ipam simulator.
type Binaries struct {
	Dir string
}

// Path returns the full path of a program.
func (b Binaries) Path(program string) string { return filepath.Join(b.Dir, program) }

// Build compiles safe-ipam with -tags crashpoints from the module rooted
// at moduleDir (the repository, or a mutated copy of it) and the
// simulator from the repository, both into dir.
func Build(ctx context.Context, moduleDir, dir string) (Binaries, error) {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return Binaries{}, err
	}
	if moduleDir == "" {
		moduleDir = root
	}
	b := Binaries{Dir: dir}
	if err := goBuild(ctx, moduleDir, "-trimpath", "-tags", crashpointTag, "-o", b.Path(SafeIPAM), pluginPkg); err != nil {
		return Binaries{}, err
	}
	// The admin commands, which safe-ipam hands to safe-ipam-admin beside
	// it: gc --dead-nodes, as the DaemonSet runs it.
	if err := goBuild(ctx, moduleDir, "-trimpath", "-o", b.Path(about.AdminBinary), adminPkg); err != nil {
		return Binaries{}, err
	}
	if err := goBuild(ctx, root, "-trimpath", "-o", b.Path(CalicoIPAM), simulatorPkg); err != nil {
		return Binaries{}, err
	}
	return b, nil
}

// ModuleRoot is the directory of safe-ipam's go.mod, found with go env
// so tests and the chaos command work from any directory in the module.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside the %s module (run from the repository)", module)
	}
	return filepath.Dir(gomod), nil
}

func goBuild(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
	cmd.Dir = dir
	// A mutated copy must not be resolved through a go.work of the
	// original checkout.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return nil
}
