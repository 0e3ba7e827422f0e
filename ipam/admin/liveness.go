package admin

import (
	"context"
	"flag"
	"fmt"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

// Liveness names the source of what runs on the node, from the flags of
// liveness.Kinds. One the operator names must be readable; only a default
// source (the CNI cache) may be absent, which means no liveness (nothing
// is judged gone), never "nothing runs". A runtime that does not answer
// is an error (incident 003). The pods API names pods and addresses, not
// containers, so only pod-name handles and addresses are judged from it;
// its flag, --kubeconfig, is Calico's group's (see Calico for the rule).
type Liveness struct {
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
	// Containers: the command acts only on attachments it can name (gc):
	// a source that names pods only is refused as the flags are read.
	// Set it before the group is registered.
	Containers bool

	// place gives the node and datastore once the Calico group, resolved
	// before this one, knows them.
	place func() Place
	node  Place
	// flags are the values of the kinds' flags this group registers;
	// values, once resolved, each kind's (by flag), "" when not chosen.
	flags    map[string]*string
	values   map[string]string
	explicit bool
}

// NewLiveness is the liveness group, on the node place gives (the Calico
// group's Place).
func NewLiveness(place func() Place) *Liveness { return &Liveness{place: place} }

// Register adds each kind's flag but a shared one (--kubeconfig, which
// Calico's group registers since it may name the datastore too; a
// command that needs containers registers it to refuse it).
func (l *Liveness) Register(fs *flag.FlagSet) {
	l.flags = map[string]*string{}
	for _, k := range liveness.Kinds() {
		def, help := k.Default, k.Help
		switch {
		case k.Shared && l.Containers && fs.Lookup(k.Flag) == nil:
			help, def = "refused: "+liveness.NeedsContainers(k.Name, fs.Name()).Error(), ""
		case k.Shared:
			continue
		case def != "" && l.ExplicitOnly:
			def, help = "", help+" (usually "+k.Default+"; read only when given)"
		case def != "":
			help += ` ("" for none)`
		}
		l.flags[k.Flag] = fs.String(k.Flag, def, help)
	}
}

// Resolve checks that one source is named and that its node is known: a
// node's CNI cache speaks for that node only; only a --live file may
// claim to list every node (--node "").
func (l *Liveness) Resolve(cmd *Command) error {
	l.node = l.place()
	l.values = map[string]string{}
	named, otherNamed, chosen := 0, false, liveness.Kind{}
	for _, k := range liveness.Kinds() {
		v := l.value(k)
		if k.PodsOnly && l.Containers && v != "" {
			return fmt.Errorf("--%s: %w", k.Flag, liveness.NeedsContainers(k.Name, cmd.Name))
		}
		// A default source turned off explicitly (--cni-cache=) also sets
		// the pods default aside.
		otherNamed = otherNamed || (!k.Shared && cmd.Set(k.Flag) && (v != "" || k.Default != ""))
		l.values[k.Flag] = v
	}
	for _, k := range liveness.Kinds() {
		if k.Shared {
			// --kubeconfig is the Calico group's: Place says what it names.
			l.values[k.Flag] = l.kubeconfig(otherNamed)
		}
		if v := l.values[k.Flag]; v != "" && (k.Default == "" || cmd.Set(k.Flag)) {
			named, chosen = named+1, k
		}
	}
	if named > 1 {
		return fmt.Errorf("%s are liveness sources; give one", liveness.Say(liveness.Any, liveness.Kind.FlagName, "and"))
	}
	l.explicit = named == 1
	if named == 1 && chosen.Default == "" {
		l.dropDefaults() // a default source is not read beside a named one
	}
	if l.ThisNode || l.Source() == nil {
		return nil
	}
	if l.node.NodeErr != nil {
		return fmt.Errorf("cannot tell this node's name as Calico does (%v); pass --node", l.node.NodeErr)
	}
	if l.node.Node == "" && !chosen.EveryNode {
		oneNode := func(k liveness.Kind) bool { return !k.EveryNode }
		return fmt.Errorf(`--node "" (every node) needs %s; %s lists one node's attachments`,
			liveness.Say(func(k liveness.Kind) bool { return k.EveryNode }, liveness.Kind.FlagName, "or"), liveness.Say(oneNode, liveness.Kind.ShowName, "or"))
	}
	return nil
}

// value is the kind's flag as given, "" when this group did not register it.
func (l *Liveness) value(k liveness.Kind) string {
	if p := l.flags[k.Flag]; p != nil {
		return *p
	}
	return ""
}

func (l *Liveness) dropDefaults() {
	for _, k := range liveness.Kinds() {
		if k.Default != "" {
			l.values[k.Flag] = ""
		}
	}
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
	for _, k := range liveness.Kinds() {
		if v := l.values[k.Flag]; v != "" {
			return k.New(v, l.node.Node)
		}
	}
	return nil
}

// Read reads the chosen source (see liveness.ReadChosen).
func (l *Liveness) Read(ctx context.Context) (*liveness.View, string, error) {
	return liveness.ReadChosen(ctx, l.Source(), l.explicit)
}
