package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/deploy/image"
	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"
	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubenode"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/e2e/harness/scaffold"
)

// upgradeImage is the tag the DaemonSet is rolled to in the upgrade test.
const upgradeImage = "safe-ipam:upgrade-test"

// suite is what TestMain prepares once: the node's CNI binaries and the
// images every node imports.
type suite struct {
	dir string
	// calico is Calico's multi-call binary: the simulator, or $CALICO_CNI.
	calico     string
	realCalico bool
	// admin is safe-ipam-admin, run on the node for doctor and audit.
	admin string
	// safeIPAM is the CNI binary the image holds.
	safeIPAM string
	// plugins are the other CNI binaries calico-node installs and the
	// runtime needs: loopback, and portmap from Calico's conflist.
	plugins []string
	pause   string
	images  []string
	// helm is the helm scripts/helm.sh builds, which installs the chart.
	helm string
}

var prepared suite

// host is this suite's run: a host that can run containerd and mount,
// and every binary and image built (the Kubernetes commands too, before
// any test's clock starts).
var host = scaffold.Suite{
	Name:    "cluster",
	Check:   func(context.Context) error { return containerd.CheckHost("cluster", "mount") },
	Build:   build,
	Timeout: 30 * time.Minute,
}

func TestMain(m *testing.M) { host.Main(m) }

// build puts every binary in dir and packs the images: pause (the
// kubelet's sandbox image), safe-ipam's, and safe-ipam's again under the
// upgrade tag. The Kubernetes commands are built (or found cached) here,
// before any test's clock starts.
func build(ctx context.Context, dir string) error {
	for _, name := range []string{"kube-apiserver", "kubelet", "kube-controller-manager", "kube-scheduler"} {
		if _, err := kubetest.Command(name); err != nil {
			return err
		}
	}
	static := filepath.Join(dir, "static") + string(filepath.Separator)
	if err := (gobuild.Build{Out: static, Pkgs: []string{"../../plugin/safe-ipam", "../../plugin/safe-ipam-etcd", "../../plugin/safe-ipam-admin",
		"../harness/containerd/cmd/pause"}, Env: []string{"CGO_ENABLED=0"}}).Run(ctx); err != nil {
		return err
	}
	cni := filepath.Join(dir, "cni") + string(filepath.Separator)
	if err := (gobuild.Build{Out: cni, Pkgs: []string{"github.com/containernetworking/plugins/plugins/main/loopback",
		"github.com/containernetworking/plugins/plugins/meta/portmap"}}).Run(ctx); err != nil {
		return err
	}
	prepared = suite{dir: dir, admin: filepath.Join(static, "safe-ipam-admin"), safeIPAM: filepath.Join(static, "safe-ipam"),
		pause: filepath.Join(static, "pause"), plugins: []string{filepath.Join(cni, "loopback"), filepath.Join(cni, "portmap")}}
	helm, err := exec.CommandContext(ctx, "bash", "../../scripts/helm.sh").Output()
	if err != nil {
		return fmt.Errorf("scripts/helm.sh: %w", err)
	}
	prepared.helm = strings.TrimSpace(string(helm))
	if path := os.Getenv("CALICO_CNI"); path != "" {
		prepared.calico, prepared.realCalico = path, true
	} else {
		// Static, as Calico ships it: safe-ipam's image, which runs it as
		// the delegate for doctor and gc, has no libc.
		prepared.calico = filepath.Join(dir, "calico")
		if err := (gobuild.Build{Out: prepared.calico, Pkgs: []string{"../cmd/calico-ipam"}, Env: []string{"CGO_ENABLED=0"}}).Run(ctx); err != nil {
			return err
		}
	}
	pauseImage := filepath.Join(dir, "pause.tar")
	if err := containerd.BuildPauseImage(prepared.pause, pauseImage, kubenode.PauseImage); err != nil {
		return err
	}
	prepared.images = []string{pauseImage}
	for _, tag := range []string{"", upgradeImage} {
		out := filepath.Join(dir, fmt.Sprintf("safe-ipam%d.tar", len(prepared.images)))
		// Build reads the three binaries from BinDir and nothing else there.
		if err := image.Build(image.Options{BinDir: static, Tag: tag, Arch: runtime.GOARCH, Revision: "cluster-suite"}, out); err != nil {
			return err
		}
		prepared.images = append(prepared.images, out)
	}
	return nil
}
