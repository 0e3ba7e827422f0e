// Package install puts safe-ipam in front of Calico's calico-ipam on a
// node, keeps it there while calico-node re-installs itself, and takes it
// out again leaving the node byte for byte as it found it.
//
// Two modes share one contract (see Mode): "conflist" routes the IPAM of
// every Calico conflist through safe-ipam; "takeover" installs safe-ipam
// as calico-ipam itself, so Calico's main plugin still applies its pool
// and ipAddrs annotations. Every change is staged beside its target and
// renamed into place, so a runtime never reads a half-written file.
package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// Defaults, as on a kubeadm node with Calico.
const (
	DefaultBinDir  = admin.DefaultBinDir
	DefaultConfDir = admin.DefaultConfDir
)

// Names of the files the modes touch.
const (
	CalicoIPAM   = cninode.CalicoIPAM
	CalicoBinary = cninode.CalicoBinary
)

// Node is one node's CNI directories.
type Node struct {
	BinDir  string
	ConfDir string
	// ReloadWait is how long uninstall waits, once a config naming
	// safe-ipam is gone, before it removes the binary that config named:
	// runtimes reload the conf dir on inotify, and a pod start already
	// under way runs the config it loaded. 0 (tests) waits not at all.
	ReloadWait time.Duration
}

// DefaultReloadWait is Node.ReloadWait for the commands.
const DefaultReloadWait = 2 * time.Second

// Dirs are n's directories, as doctor and the admin commands read them.
func (n Node) Dirs() cninode.Dirs { return cninode.Dirs{BinDir: n.BinDir, ConfDir: n.ConfDir} }

func (n Node) bin(name string) string  { return filepath.Join(n.BinDir, name) }
func (n Node) conf(name string) string { return filepath.Join(n.ConfDir, name) }

// Suffixes of what install keeps beside a file it replaces. They are not
// .conf/.conflist/.json, so no runtime ever loads a backup as a network.
const (
	origSuffix   = ".safe-ipam-orig" // a hard link to the file as it was
	absentSuffix = ".safe-ipam-none" // the file did not exist
	sumSuffix    = ".safe-ipam-sum"  // the SHA-256 of the kept original
	tempPrefix   = ".safe-ipam-tmp-" // staged, not yet renamed into place
)

func backupPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+origSuffix)
}

func sumPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+sumSuffix)
}

func absentPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+absentSuffix)
}

// checkDirs fails with a message naming the flag when a directory is
// missing or not a directory.
func (n Node) checkDirs() error {
	for _, d := range []struct{ flag, dir string }{{"--cni-bin-dir", n.BinDir}, {"--cni-conf-dir", n.ConfDir}} {
		st, err := os.Stat(d.dir)
		if err != nil {
			return fmt.Errorf("%s %s: %w", d.flag, d.dir, err)
		}
		if !st.IsDir() {
			return fmt.Errorf("%s %s: not a directory", d.flag, d.dir)
		}
	}
	return nil
}

// removeStale drops staged files a killed install left behind.
func (n Node) removeStale() error {
	var errs []error
	for _, dir := range []string{n.BinDir, n.ConfDir} {
		entries, _ := bounded.ReadDir(dir)
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), tempPrefix) {
				continue
			}
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// isBackupName says whether a directory entry is install's own.
func isBackupName(name string) bool {
	return strings.HasPrefix(name, ".") && (strings.HasSuffix(name, origSuffix) || strings.HasSuffix(name, absentSuffix) || strings.HasSuffix(name, sumSuffix) || strings.HasPrefix(name, tempPrefix))
}
