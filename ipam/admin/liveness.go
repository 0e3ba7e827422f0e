package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/liveness"
)

// Liveness names the source of what runs on the node. One the operator
// names must be readable; only the default CNI cache may be absent, which
// means no liveness (nothing is judged gone), never "nothing runs".
type Liveness struct {
	File, CNICache string
	// CRIEndpoint is the runtime's CRI socket; a runtime that does not
	// answer is an error (incident 003), never "nothing runs".
	CRIEndpoint string
	// Kubeconfig reaches the Kubernetes API: the pods bound to the node
	// are what should run. It names pods and addresses, not containers,
	// so only pod-name handles and addresses are judged from it. It is
	// --kubeconfig (Calico's group registers it; see Calico for the rule).
	Kubeconfig string
	// PodsByDefault: with the kubernetes datastore, its API server is the
	// source unless another is named (audit, repair; not adopt or gc,
	// which need containers).
	PodsByDefault bool
	// ThisNode: the source speaks for the node the command runs on,
	// whatever name each config gives it (doctor reads the names from
	// the node's configs, after the flags), so no node is resolved.
	ThisNode bool
	// ExplicitOnly: the command reads a source only when one is named
	// (gc, doctor), so --cni-cache has no default to show. Set it before
	// the group is registered.
	ExplicitOnly bool

	// place gives the node and datastore once the Calico group, resolved
	// before this one, knows them.
	place    func() Place
	node     Place
	explicit bool
}

// NewLiveness is the liveness group, on the node place gives (the Calico
// group's Place).
func NewLiveness(place func() Place) *Liveness { return &Liveness{place: place} }

// Register adds --live, --cni-cache and --cri-endpoint; --kubeconfig is
// Calico's, since it may name the datastore too.
func (l *Liveness) Register(fs *flag.FlagSet) {
	fs.StringVar(&l.File, "live", "", `JSON list of {"containerID","ifname"} known to be running (optionally with "network", "podNamespace", "podName", "ips")`)
	cache, cacheHelp := liveness.DefaultCNICache, `libcni result cache, listing the attachments the runtime set up on this node ("" for none)`
	if l.ExplicitOnly {
		cache, cacheHelp = "", "libcni result cache, listing the attachments the runtime set up on this node (usually "+liveness.DefaultCNICache+"; read only when given)"
	}
	fs.StringVar(&l.CNICache, "cni-cache", cache, cacheHelp)
	fs.StringVar(&l.CRIEndpoint, "cri-endpoint", "", "the container runtime's CRI socket, e.g. unix:///run/containerd/containerd.sock: its pod sandboxes, READY or NOTREADY (a sandbox containerd cannot judge is NOTREADY, and may still run), are what runs on this node")
}

// Resolve checks that one source is named and that its node is known: a
// node's CNI cache speaks for that node only; only a --live file may
// claim to list every node (--node "").
func (l *Liveness) Resolve(cmd *Command) error {
	l.node = l.place()
	explicitCache := cmd.Set("cni-cache") && l.CNICache != ""
	// --cni-cache= given explicitly (no liveness) also sets the pods
	// default aside.
	l.Kubeconfig = l.kubeconfig(l.File != "" || cmd.Set("cni-cache") || l.CRIEndpoint != "")
	named := 0
	for _, given := range []bool{l.File != "", explicitCache, l.CRIEndpoint != "", l.Kubeconfig != ""} {
		if given {
			named++
		}
	}
	if named > 1 {
		return errors.New("--live, --cni-cache, --cri-endpoint and --kubeconfig are liveness sources; give one")
	}
	l.explicit = named == 1
	if l.CRIEndpoint != "" || l.File != "" || l.Kubeconfig != "" {
		l.CNICache = "" // the default cache is not read beside a named source
	}
	if l.ThisNode || (l.File == "" && l.CNICache == "" && l.CRIEndpoint == "" && l.Kubeconfig == "") {
		return nil
	}
	if l.node.NodeErr != nil {
		return fmt.Errorf("cannot tell this node's name as Calico does (%v); pass --node", l.node.NodeErr)
	}
	if l.node.Node == "" && l.File == "" {
		return errors.New(`--node "" (every node) needs --live; a CNI cache, a runtime or the pods API lists one node's attachments`)
	}
	return nil
}

// kubeconfig is the pods source's kubeconfig, or "": with etcd,
// --kubeconfig; with the kubernetes datastore, its API server when the
// command takes it by default and no other source is named.
func (l *Liveness) kubeconfig(otherNamed bool) string {
	if l.node.Datastore != datastore.Kubernetes {
		return l.node.KubeconfigFlag
	}
	if l.PodsByDefault && !otherNamed {
		return l.node.Kubeconfig
	}
	return ""
}

// Explicit says whether the operator named a source (one that must be
// readable), as opposed to the default cache.
func (l *Liveness) Explicit() bool { return l.explicit }

// Source is the chosen source, or nil when none is named.
func (l *Liveness) Source() liveness.Source {
	switch {
	case l.File != "":
		return liveness.File{Path: l.File, Node: l.node.Node}
	case l.CRIEndpoint != "":
		return liveness.CRI{Endpoint: l.CRIEndpoint, Node: l.node.Node}
	case l.Kubeconfig != "":
		return liveness.Pods{Kubeconfig: l.Kubeconfig, Node: l.node.Node}
	case l.CNICache != "":
		return liveness.CNICache{Dir: l.CNICache, Node: l.node.Node}
	}
	return nil
}

// Read reads the chosen source (see liveness.ReadChosen).
func (l *Liveness) Read(ctx context.Context) (*liveness.View, string, error) {
	return liveness.ReadChosen(ctx, l.Source(), l.explicit)
}
