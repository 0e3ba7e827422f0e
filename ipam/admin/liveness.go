package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/safe-ipam/safe-ipam/ipam/liveness"
)

// Liveness names the source of what runs on the node. One the operator
// names must be readable; only the default CNI cache may be absent, which
// means no liveness (nothing is judged gone), never "nothing runs".
type Liveness struct {
	File, CNICache string

	node     *Calico
	explicit bool
}

// NewLiveness is the liveness group, on the node that node resolves.
func NewLiveness(node *Calico) *Liveness { return &Liveness{node: node} }

// Register adds --live and --cni-cache.
func (l *Liveness) Register(fs *flag.FlagSet) {
	fs.StringVar(&l.File, "live", "", `JSON list of {"containerID","ifname"} known to be running (optionally with "network", "podNamespace", "podName", "ips")`)
	fs.StringVar(&l.CNICache, "cni-cache", liveness.DefaultCNICache, `libcni result cache, listing the attachments the runtime set up on this node ("" for none)`)
}

// Resolve checks that one source is named and that its node is known: a
// node's CNI cache speaks for that node only; only a --live file may
// claim to list every node (--node "").
func (l *Liveness) Resolve(cmd *Command) error {
	l.explicit = l.File != "" || (cmd.Set("cni-cache") && l.CNICache != "")
	if l.File != "" && cmd.Set("cni-cache") && l.CNICache != "" {
		return errors.New("--live and --cni-cache are two liveness sources; give one")
	}
	if l.File == "" && l.CNICache == "" {
		return nil
	}
	if l.node.NodeErr != nil {
		return fmt.Errorf("cannot tell this node's name as Calico does (%v); pass --node", l.node.NodeErr)
	}
	if l.node.Node == "" && l.File == "" {
		return errors.New(`--node "" (every node) needs --live; a CNI cache lists one node's attachments`)
	}
	return nil
}

// Source is the chosen source, or nil when none is named.
func (l *Liveness) Source() liveness.Source {
	switch {
	case l.File != "":
		return liveness.File{Path: l.File, Node: l.node.Node}
	case l.CNICache != "":
		return liveness.CNICache{Dir: l.CNICache, Node: l.node.Node}
	}
	return nil
}

// Read reads the chosen source. It returns a nil view with a note when
// there is no liveness: no source named, or the default cache unreadable.
func (l *Liveness) Read(ctx context.Context) (*liveness.View, string, error) {
	src := l.Source()
	if src == nil {
		return nil, "none", nil
	}
	v, err := src.Read(ctx)
	if err != nil {
		if l.explicit {
			return nil, "", err
		}
		return nil, fmt.Sprintf("none (%v)", err), nil
	}
	return v, "", nil
}
