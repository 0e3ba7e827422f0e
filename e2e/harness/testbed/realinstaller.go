package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
)

// EnvCalicoInstall names Calico's real CNI installer: a binary that runs
// install.Install of projectcalico/calico's cni-plugin/pkg/install, as
// calico-node's install-cni init container does (docs/CONTRIBUTING.md
// says how to build it). When set, CalicoInstaller.Run runs it in place of
// its model.
const EnvCalicoInstall = "CALICO_INSTALL"

// nodeRoot is the path of another mount namespace's root, as the cluster
// suite's nodes are reached from the host.
var nodeRoot = regexp.MustCompile(`^/proc/([0-9]+)/root(/.*)$`)

// runReal runs Calico's installer at path with the operator's
// environment: the rendered network config, UPDATE_CNI_BINARIES=true and
// CNI_CONF_NAME. It reads /host/opt/cni/bin, /host/etc/cni/net.d and
// /opt/cni/bin (its own binaries), so it runs chrooted into a tmpfs that
// has those, in a mount namespace of its own: the host's mounts never
// change. A node's dirs under /proc/<pid>/root are reached inside that
// node's mount namespace.
func (c CalicoInstaller) runReal(path string) error {
	if c.Main != "" && c.Main != c.Binary {
		return fmt.Errorf("%s installs one binary as calico and calico-ipam; this node wants %s as calico", EnvCalicoInstall, c.Main)
	}
	binDir, confDir := c.BinDir, c.ConfDir
	var enter []string
	if m := nodeRoot.FindStringSubmatch(binDir); m != nil {
		cm := nodeRoot.FindStringSubmatch(confDir)
		if cm == nil || cm[1] != m[1] {
			return fmt.Errorf("%s: the bin dir %s and conf dir %s are not one node's", EnvCalicoInstall, binDir, confDir)
		}
		enter = []string{"nsenter", "-t", m[1], "-m", "--"}
		binDir, confDir = m[2], cm[2]
	}
	root, err := os.MkdirTemp("", "calico-install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	name := c.ConfName
	if name == "" {
		name = "10-calico.conflist"
	}
	// $1 the tmpfs root, $2 the bin dir, $3 the conf dir, $4 Calico's
	// binary, $5 the installer.
	const script = `set -e
mount -t tmpfs tmpfs "$1"
mkdir -p "$1/host/opt/cni/bin" "$1/host/etc/cni/net.d" "$1/opt/cni/bin"
mount --bind "$2" "$1/host/opt/cni/bin"
mount --bind "$3" "$1/host/etc/cni/net.d"
cp "$4" "$1/opt/cni/bin/calico"
cp "$5" "$1/install"
exec chroot "$1" /install`
	args := append(enter, "unshare", "-m", "--propagation", "private", "sh", "-c", script, "calico-install", root, binDir, confDir, c.Binary, path)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "CNI_NETWORK_CONFIG="+string(c.Network), "UPDATE_CNI_BINARIES=true", "CNI_CONF_NAME="+name,
		"CNI_NET_DIR=/etc/cni/net.d", "SLEEP=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("Calico's installer %s: %v\n%s", filepath.Base(path), err, out)
	}
	return nil
}
