package admin

import "flag"

// Default CNI directories of a node.
const (
	DefaultBinDir  = "/opt/cni/bin"
	DefaultConfDir = "/etc/cni/net.d"
)

// NodeDirs are the node's CNI bin and config directories.
type NodeDirs struct {
	BinDir, ConfDir string
}

// Register adds --cni-bin-dir and --cni-conf-dir.
func (d *NodeDirs) Register(fs *flag.FlagSet) {
	fs.StringVar(&d.BinDir, "cni-bin-dir", DefaultBinDir, "the node's CNI bin dir")
	fs.StringVar(&d.ConfDir, "cni-conf-dir", DefaultConfDir, "the node's CNI config dir")
}

// Resolve has nothing to check.
func (d *NodeDirs) Resolve(*Command) error { return nil }
