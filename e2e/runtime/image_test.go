package runtime

import (
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/deploy/image"
	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/about"
)

// The image `make image` builds (here from the suite's binaries) is one
// a node's containerd imports, under the tag deploy/safe-ipam.yaml pins.
func TestImageImportsIntoContainerd(t *testing.T) {
	ctx := testContext(t)
	n := newNode(t, nodeOptions{gen: testbed.Modern})
	out := filepath.Join(t.TempDir(), "safe-ipam-image.tar")
	if err := image.Build(image.Options{BinDir: prepared.bin.Dir, Arch: goruntime.GOARCH}, out); err != nil {
		t.Fatal(err)
	}
	if err := containerd.ImportImage(ctx, n.cd.Socket(), out); err != nil {
		t.Fatal(err)
	}
	list, err := exec.CommandContext(ctx, "ctr", "--address", n.cd.Socket(), "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images ls: %v: %s", err, list)
	}
	if want := about.Image; !strings.Contains(string(list), want) {
		t.Fatalf("containerd lists %q; want %s", list, want)
	}
}
