package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// Program names in a CNI_PATH the chaos suite builds.
const (
	SafeIPAM   = builds.CNIBinary
	CalicoIPAM = "calico-ipam"
)

const (
	module        = "github.com/safe-ipam/safe-ipam"
	pluginPkg     = "./plugin/safe-ipam"
	etcdPkg       = "./plugin/safe-ipam-etcd"
	adminPkg      = "./plugin/safe-ipam-admin"
	simulatorPkg  = module + "/e2e/cmd/calico-ipam"
	crashpointTag = "crashpoints"
)

// Binaries is a directory used as CNI_PATH: safe-ipam and safe-ipam-etcd
// built with crash points, and the calico-ipam simulator.
type Binaries struct {
	Dir string
}

// Path returns the full path of a program.
func (b Binaries) Path(program string) string { return filepath.Join(b.Dir, program) }

// Build compiles safe-ipam and safe-ipam-etcd with -tags crashpoints from the module rooted
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
	builds := []gobuild.Build{
		{Dir: moduleDir, Out: b.Path(SafeIPAM), Pkgs: []string{pluginPkg}, Flags: []string{"-tags", crashpointTag}},
		// The build safe-ipam hands calls over etcd to: the chaos suite's
		// records are in Calico's etcd.
		{Dir: moduleDir, Out: b.Path(builds.EtcdBinary), Pkgs: []string{etcdPkg}, Flags: []string{"-tags", crashpointTag}},
		// The admin commands, which safe-ipam hands to safe-ipam-admin
		// beside it: gc --dead-nodes, as the DaemonSet runs it.
		{Dir: moduleDir, Out: b.Path(builds.AdminBinary), Pkgs: []string{adminPkg}},
		{Dir: root, Out: b.Path(CalicoIPAM), Pkgs: []string{simulatorPkg}},
	}
	for _, build := range builds {
		build.Flags = append([]string{"-trimpath"}, build.Flags...)
		// A mutated copy must not be resolved through a go.work of the
		// original checkout.
		build.Env = []string{"GOWORK=off"}
		if err := build.Run(ctx); err != nil {
			return Binaries{}, err
		}
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
