// Package image builds images without Docker, as docker-archive tarballs
// that `ctr images import`, `docker load` and registries' tools read:
// safe-ipam's own (Build: the CNI binary and the admin binary in
// /usr/local/bin), and, for the tests, any one-layer image (Write).
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// BinDir is where safe-ipam's image holds the binaries (the manifest's
// commands name it).
const BinDir = "/usr/local/bin"

// Options say what goes into safe-ipam's image.
type Options struct {
	// BinDir holds the three binaries, built statically (CGO_ENABLED=0):
	// install copies the CNI binary and its etcd build onto nodes, whose
	// libc they must not depend on.
	BinDir string
	// Tag is the image's name and tag; "" is about.Image.
	Tag string
	// Revision is the build (git describe), recorded as a label.
	Revision string
	// Arch is the binaries' architecture (GOARCH).
	Arch string
}

// Build writes safe-ipam's image to out.
func Build(o Options, out string) error {
	if o.Tag == "" {
		o.Tag = about.Image
	}
	files := map[string]File{}
	for _, bin := range []string{builds.CNIBinary, builds.EtcdBinary, builds.AdminBinary} {
		data, err := os.ReadFile(filepath.Join(o.BinDir, bin))
		if err != nil {
			return fmt.Errorf("image: %w (make image puts the three binaries in bin/image/)", err)
		}
		files[path.Join(BinDir, bin)] = File{Data: data, Mode: 0o755}
	}
	return Write(out, o.Tag, o.Arch, files, v1.Config{
		Entrypoint: []string{path.Join(BinDir, builds.CNIBinary)},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "safe-ipam",
			"org.opencontainers.image.version":  about.Release,
			"org.opencontainers.image.revision": o.Revision,
		},
	})
}

// Digest is the digest of the image in the docker-archive at out, tagged
// tag: what a registry serves it under once pushed as it is (crane push
// keeps the manifest), for pinning.
func Digest(out, tag string) (string, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return "", fmt.Errorf("image tag %q: %w", tag, err)
	}
	img, err := tarball.ImageFromPath(out, &ref)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", out, err)
	}
	h, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("the digest of %s: %w", out, err)
	}
	return h.String(), nil
}

// File is one regular file of an image.
type File struct {
	Data []byte
	Mode int64
}

// Write writes a one-layer linux image of files (by absolute path) with
// config, tagged tag, to out.
func Write(out, tag, arch string, files map[string]File, config v1.Config) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("image tag %q: %w", tag, err)
	}
	layerTar, err := layerOf(files)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	if err != nil {
		return fmt.Errorf("image layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("image layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Config = arch, "linux", config
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("image config: %w", err)
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// layerOf is a layer holding files and their directories, owned by root,
// with a fixed time, so that the same files make the same image.
func layerOf(files map[string]File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		rel := path.Clean(p)[1:] // "/usr/local/bin/x" -> "usr/local/bin/x"
		for d := path.Dir(rel); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		f := files[p]
		hdr := &tar.Header{Name: path.Clean(p)[1:], Typeflag: tar.TypeReg, Mode: f.Mode, Size: int64(len(f.Data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
