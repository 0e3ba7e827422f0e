package containerd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/safe-ipam/safe-ipam/deploy/image"
)

// SandboxImage is the tag the sandbox image is imported under, and the
// containerd config's sandbox_image.
const SandboxImage = "safe-ipam.test/pause:1"

// BuildSandboxImage packs the static pause program as a one-layer image
// at archivePath (a docker-archive), tagged SandboxImage.
func BuildSandboxImage(pause, archivePath string) error {
	return BuildPauseImage(pause, archivePath, SandboxImage)
}

// BuildPauseImage packs the static pause program as a one-layer image
// tagged tag: a sandbox image, or a container that only waits.
func BuildPauseImage(pause, archivePath, tag string) error {
	bin, err := os.ReadFile(pause)
	if err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	return image.Write(archivePath, tag, runtime.GOARCH, map[string]image.File{"/pause": {Data: bin, Mode: 0o755}},
		v1.Config{Entrypoint: []string{"/pause"}})
}

// ImportImage imports a docker-archive into containerd's k8s.io
// namespace, where the CRI plugin looks for the sandbox image.
func ImportImage(ctx context.Context, socket, archivePath string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", "--address", socket, "-n", "k8s.io", "images", "import", archivePath).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", filepath.Base(archivePath), err, out)
	}
	return nil
}
