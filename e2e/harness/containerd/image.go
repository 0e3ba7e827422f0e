package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"time"
)

// SandboxImage is the tag the sandbox image is imported under, and the
// containerd config's sandbox_image.
const SandboxImage = "safe-ipam.test/pause:1"

// BuildSandboxImage packs the static pause program as a one-layer
// docker-archive at archivePath: the layer tar, a config naming the
// layer's diff ID and the entrypoint, and a manifest.json with the tag.
func BuildSandboxImage(pause, archivePath string) error {
	bin, err := os.ReadFile(pause)
	if err != nil {
		return fmt.Errorf("sandbox image: %w", err)
	}
	layer, err := tarOf(map[string]tarFile{"pause": {data: bin, mode: 0o755}})
	if err != nil {
		return fmt.Errorf("sandbox image layer: %w", err)
	}
	sum := sha256.Sum256(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{SandboxImage}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		return err
	}
	archive, err := tarOf(map[string]tarFile{
		"manifest.json": {data: manifest, mode: 0o644},
		"config.json":   {data: config, mode: 0o644},
		"layer.tar":     {data: layer, mode: 0o644},
	})
	if err != nil {
		return fmt.Errorf("sandbox image archive: %w", err)
	}
	return os.WriteFile(archivePath, archive, 0o644)
}

type tarFile struct {
	data []byte
	mode int64
}

func tarOf(files map[string]tarFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range sortedKeys(files) {
		f := files[name]
		hdr := &tar.Header{Name: name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func sortedKeys(m map[string]tarFile) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.Sort(keys)
	return keys
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
