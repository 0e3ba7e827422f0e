package image

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// The image holds the three binaries, executable, under the tag the manifest
// pins, and reads back as an image; without a binary there is none.
func TestBuild(t *testing.T) {
	bin := t.TempDir()
	want := map[string]string{builds.CNIBinary: "cni build", builds.EtcdBinary: "etcd build", builds.AdminBinary: "admin build"}
	for name, data := range want {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := Build(Options{BinDir: bin, Revision: "abc123", Arch: "amd64"}, out); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(about.Image)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("reading the image back under %s: %v", about.Image, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || strings.Join(cf.Config.Entrypoint, " ") != BinDir+"/"+builds.CNIBinary ||
		cf.Config.Labels["org.opencontainers.image.version"] != about.Release || cf.Config.Labels["org.opencontainers.image.revision"] != "abc123" {
		t.Fatalf("config = %+v", cf)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, _ := io.ReadAll(tr)
		if hdr.Mode != 0o755 || hdr.Uid != 0 {
			t.Errorf("%s: mode %o uid %d", hdr.Name, hdr.Mode, hdr.Uid)
		}
		got[hdr.Name] = string(data)
	}
	for name, data := range want {
		if got["usr/local/bin/"+name] != data {
			t.Errorf("the image's /usr/local/bin/%s = %q; want %q (holds %v)", name, got["usr/local/bin/"+name], data, got)
		}
	}
	if err := os.Remove(filepath.Join(bin, builds.AdminBinary)); err != nil {
		t.Fatal(err)
	}
	if err := Build(Options{BinDir: bin}, out); err == nil || !strings.Contains(err.Error(), builds.AdminBinary) {
		t.Fatalf("Build without the admin binary: %v; want an error naming it", err)
	}
}

// Issue 33, finding 6: the image is named by its full reference (a short
// name is resolved by each node's runtime configuration), and make image
// gives the digest to pin: the same binaries make the same digest,
// other binaries another.
func TestFullReferenceAndDigest(t *testing.T) {
	if _, err := name.NewTag(about.Image, name.StrictValidation); err != nil {
		t.Errorf("about.Image %q is not a full reference (registry and tag explicit): %v", about.Image, err)
	}
	digestOf := func(cni string) string {
		t.Helper()
		bin := t.TempDir()
		for name, data := range map[string]string{builds.CNIBinary: cni, builds.EtcdBinary: "etcd build", builds.AdminBinary: "admin build"} {
			if err := os.WriteFile(filepath.Join(bin, name), []byte(data), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(t.TempDir(), "image.tar")
		if err := Build(Options{BinDir: bin, Revision: "abc123", Arch: "amd64"}, out); err != nil {
			t.Fatal(err)
		}
		d, err := Digest(out, about.Image)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first, again, other := digestOf("cni build"), digestOf("cni build"), digestOf("another cni build")
	if !strings.HasPrefix(first, "sha256:") || len(first) != len("sha256:")+64 || first != again || first == other {
		t.Errorf("digests %s, %s (same binaries), %s (other binaries); want one sha256 digest per build", first, again, other)
	}
}
