package liveness

import (
	"fmt"
	"strings"
)

// Kind is one kind of source as an operator names it on an admin
// command's line: its flag, what the flag takes, its help, and how the
// source is built. The commands register, count, describe and build their
// sources from Kinds alone, so a new source is its Source type and one
// row there.
type Kind struct {
	// Flag names the source, e.g. "cri-endpoint"; Arg is what it takes,
	// for messages ("URL").
	Flag, Arg string
	Help      string
	// Name is the source in a sentence: "the pods API".
	Name string
	// Default is read when no source is named, by the commands that read
	// one by default ("" for none).
	Default string
	// PodsOnly: the source names pods and their addresses, not
	// containers (View.PodsOnly); a command that acts on attachments
	// (gc, adopt) cannot use it.
	PodsOnly bool
	// EveryNode: the source can list every node's attachments (--node "").
	EveryNode bool
	// Shared: the flag names more than the source (--kubeconfig also
	// names Calico's API server); the group that resolves the other
	// meaning registers it.
	Shared bool
	// New is the source value names, speaking for node.
	New func(value, node string) Source
}

// Kinds are the sources an operator can name, in the order messages list
// them.
func Kinds() []Kind {
	return []Kind{
		{Flag: "cri-endpoint", Arg: "URL", Name: "a runtime",
			Help: "the container runtime's CRI socket, e.g. unix:///run/containerd/containerd.sock: its pod sandboxes, READY or NOTREADY (a sandbox containerd cannot judge is NOTREADY, and may still run), are what runs on this node",
			New:  func(v, node string) Source { return CRI{Endpoint: v, Node: node} }},
		{Flag: "cni-cache", Arg: "DIR", Name: "a CNI cache", Default: DefaultCNICache,
			Help: "libcni result cache, listing the attachments the runtime set up on this node",
			New:  func(v, node string) Source { return CNICache{Dir: v, Node: node} }},
		{Flag: "live", Arg: "FILE", Name: "a --live file", EveryNode: true,
			Help: `JSON list of {"containerID","ifname"} known to be running (optionally with "network", "podNamespace", "podName", "ips")`,
			New:  func(v, node string) Source { return File{Path: v, Node: node} }},
		{Flag: "kubeconfig", Arg: "FILE", Name: "the pods API", PodsOnly: true, Shared: true,
			Help: "the pods bound to this node are what should run (names pods and addresses, not containers)",
			New:  func(v, node string) Source { return Pods{Kubeconfig: v, Node: node} }},
	}
}

// KindOf is the kind flag names; ok is false for none.
func KindOf(flag string) (k Kind, ok bool) {
	for _, k := range Kinds() {
		if k.Flag == flag {
			return k, true
		}
	}
	return Kind{}, false
}

// Say lists what show says of each kind keep selects, in table order,
// as a sentence does: "a, b or c" (join "or"), "a, b and c" (join
// "and"); or with join "|" as a usage line does: "a | b | c".
func Say(keep func(Kind) bool, show func(Kind) string, join string) string {
	var said []string
	for _, k := range Kinds() {
		if keep(k) {
			said = append(said, show(k))
		}
	}
	switch {
	case join == "|":
		return strings.Join(said, " | ")
	case len(said) < 2:
		return strings.Join(said, "")
	}
	return strings.Join(said[:len(said)-1], ", ") + " " + join + " " + said[len(said)-1]
}

// FlagName shows the kind as its flag: "--live".
func (k Kind) FlagName() string { return "--" + k.Flag }

// FlagArg shows the kind as its flag and what it takes: "--live FILE".
func (k Kind) FlagArg() string { return "--" + k.Flag + " " + k.Arg }

// ShowName shows the kind as a sentence names it: "the pods API".
func (k Kind) ShowName() string { return k.Name }

// Any selects every kind.
func Any(Kind) bool { return true }

// NamesContainers selects the kinds that name containers.
func NamesContainers(k Kind) bool { return !k.PodsOnly }

// NeedsContainers is the refusal of a source (what) that names pods, not
// containers, by a command that acts only on attachments it can name.
func NeedsContainers(what, command string) error {
	return fmt.Errorf("%s names pods and their addresses, not containers: %s needs %s", what, command, Say(NamesContainers, Kind.FlagName, "or"))
}
