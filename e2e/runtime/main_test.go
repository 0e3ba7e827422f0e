package runtime

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"
	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/e2e/harness/scaffold"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// Programs this suite adds to the testbed's CNI_PATH.
const (
	recorderPlugin = "cni-recorder"
	pauseProgram   = "pause"
)

// suite is what TestMain prepares once per go test run.
type suite struct {
	bin testbed.Binaries
	// image is the sandbox image's docker-archive.
	image string
}

var prepared suite

// host is this suite's run: a host that can run containerd, and the
// testbed's programs, the recorder and the sandbox image built.
var host = scaffold.Suite{
	Name:  "runtime",
	Check: func(context.Context) error { return containerd.CheckHost("runtime") },
	Build: build,
}

func TestMain(m *testing.M) { host.Main(m) }

// build puts the testbed's programs, the recorder and the static pause
// program in dir, and packs the sandbox image.
func build(ctx context.Context, dir string) error {
	var err error
	if prepared.bin, err = testbed.Build(ctx, dir, os.Getenv("CALICO_IPAM")); err != nil {
		return err
	}
	if err := (gobuild.Build{Out: filepath.Join(dir, recorderPlugin), Pkgs: []string{"../harness/containerd/cmd/cni-recorder"}}).Run(ctx); err != nil {
		return err
	}
	pause := filepath.Join(dir, pauseProgram)
	// Static: the image has nothing but this file.
	if err := (gobuild.Build{Out: pause, Pkgs: []string{"../harness/containerd/cmd/pause"}, Env: []string{"CGO_ENABLED=0"}}).Run(ctx); err != nil {
		return err
	}
	prepared.image = filepath.Join(dir, "pause-image.tar")
	return containerd.BuildSandboxImage(pause, prepared.image)
}
