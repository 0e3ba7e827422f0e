package admin

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// Default CNI directories of a node.
const (
	DefaultBinDir  = "/opt/cni/bin"
	DefaultConfDir = "/etc/cni/net.d"
)

// binDirFlag is --cni-bin-dir, with what the command uses it for.
func binDirFlag(fs *flag.FlagSet, dst *string, use string) {
	fs.StringVar(dst, "cni-bin-dir", DefaultBinDir, "the node's CNI bin dir"+use)
}

// NodeDirs are the node's CNI bin and config directories.
type NodeDirs struct {
	BinDir, ConfDir string
}

// Register adds --cni-bin-dir and --cni-conf-dir.
func (d *NodeDirs) Register(fs *flag.FlagSet) {
	binDirFlag(fs, &d.BinDir, "")
	fs.StringVar(&d.ConfDir, "cni-conf-dir", DefaultConfDir, "the node's CNI config dir")
}

// Resolve has nothing to check.
func (d *NodeDirs) Resolve(*Command) error { return nil }

// NodeConf is --conf, --cni-bin-dir and --node: the node's CNI config as
// calico-ipam reads it, and this node's name as Calico names it, the flag
// winning. The Calico group builds on it; gc uses it alone.
type NodeConf struct {
	Conf string
	File *cninode.File // nil without --conf
	// BinDir is the node's CNI bin dir, where a takeover install put
	// safe-ipam as calico-ipam. A CNI_PATH list is accepted: the config
	// is read with the first directory that has a calico-ipam.
	BinDir string
	Node   string
	// NodeErr is why the node name could not be resolved; a command that
	// needs the node reports it.
	NodeErr error
	// Required, when set, makes --conf required and says what for. Set
	// it, and BinDirUse (what else the command finds in the bin dir),
	// before the group is registered.
	Required, BinDirUse string

	cmd *Command
}

// Register adds --conf, --cni-bin-dir and --node.
func (n *NodeConf) Register(fs *flag.FlagSet) {
	help := "the node's CNI config or conflist: learn the network, Calico's datastore (etcd endpoints and TLS files, or kubeconfig), the node name and where safe-ipam keeps its records from it (flags given explicitly win)"
	if n.Required != "" {
		help += " (required: " + n.Required + ")"
	}
	fs.StringVar(&n.Conf, "conf", "", help)
	binDirFlag(fs, &n.BinDir, ": with --conf, a calico-ipam there that is safe-ipam (the takeover install) makes the config's calico-ipam IPAM safe-ipam's"+n.BinDirUse)
	fs.StringVar(&n.Node, "node", "", `this node's name (default: as Calico names it: --conf's nodename or nodename_file, else `+config.CalicoNodenameFile+`, else the host name)`)
}

// Resolve reads --conf and resolves the node as calico-ipam does: a
// judgment under another name than Calico's would be about the wrong node.
func (n *NodeConf) Resolve(cmd *Command) error {
	n.cmd = cmd
	if n.Conf == "" && n.Required != "" {
		return fmt.Errorf("--conf is required: %s", n.Required)
	}
	return n.Read()
}

// Read reads --conf: as the flags are resolved, and again for a command
// that keeps running (gc --every), since calico-node may rewrite it.
func (n *NodeConf) Read() error {
	var calico config.CalicoSettings
	if n.Conf != "" {
		file, err := cninode.ReadFile(n.Conf, n.calicoBinDir())
		if err != nil {
			return err
		}
		n.File, calico = file, file.Calico
	}
	if !n.cmd.Set("node") {
		n.Node, n.NodeErr = calico.Node()
	}
	return nil
}

// calicoBinDir is the directory of --cni-bin-dir the runtime would run
// calico-ipam from: a single directory as given; of a CNI_PATH list, the
// first that has one ("" when none does).
func (n *NodeConf) calicoBinDir() string {
	dirs := filepath.SplitList(n.BinDir)
	if len(dirs) == 1 {
		return dirs[0]
	}
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, cninode.CalicoIPAM)); err == nil {
			return dir
		}
	}
	return ""
}

// Place is the node as this group resolved it (no datastore: the Calico
// group's Place adds it).
func (n *NodeConf) Place() Place { return Place{Node: n.Node, NodeErr: n.NodeErr} }
