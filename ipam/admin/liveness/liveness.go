// Package liveness says which attachments run on a node. Each source (a
// file, the runtime's CNI result cache, and others) is one small Source
// side by side with the rest, and all pass one contract test
// (livenesstest); Kinds is the one table of how an operator names each
// (flag, help, constructor), which every admin command reads. A source that cannot be read whole is an error, never
// "nothing runs": incident 003 was a garbage collector that took an
// unreachable runtime for an empty one.
package liveness

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Running is an attachment known to be running.
type Running struct {
	Network      string   `json:"network,omitempty"`
	ContainerID  string   `json:"containerID"`
	IfName       string   `json:"ifname"`
	PodNamespace string   `json:"podNamespace,omitempty"`
	PodName      string   `json:"podName,omitempty"`
	PodUID       string   `json:"podUID,omitempty"`
	IPs          []string `json:"ips,omitempty"`
}

// Source reads what runs on the node it speaks for.
type Source interface {
	// Read lists every attachment that runs. Failing to read any part of
	// the source is an error: a partial view must not pass as the truth.
	Read(ctx context.Context) (*View, error)
}

// View is what a source said runs on one node ("" for every node).
type View struct {
	Source      string
	Node        string
	Attachments []Running
	// ContainersOnly marks a source that lists containers but not their
	// interfaces (a runtime's CRI API knows a sandbox's IPs, not its
	// ifnames): every interface of a listed container runs, so a record
	// for another ifname (net1) of it must not look gone.
	ContainersOnly bool
	// PodsOnly marks a source that names pods and their addresses but no
	// containers or interfaces (the Kubernetes API). It cannot say that a
	// container stopped, so every container looks running in it: a record
	// or a container-keyed handle is never judged gone from it. Only
	// pod-name handles and addresses are judged.
	PodsOnly bool

	containers map[string]bool
	pods       map[string]bool
	addrs      map[netip.Addr]bool
	attach     map[[2]string]bool
	// podBlind counts entries that name neither their pod nor an address:
	// a running container of any pod could hide behind each of them.
	podBlind int
}

// NewView indexes what a source listed.
func NewView(source, node string, atts []Running) *View {
	v := &View{Source: source, Node: node, Attachments: atts,
		containers: map[string]bool{}, pods: map[string]bool{}, addrs: map[netip.Addr]bool{}, attach: map[[2]string]bool{}}
	for _, a := range atts {
		v.containers[a.ContainerID] = true
		v.attach[[2]string{a.ContainerID, a.IfName}] = true
		named := a.PodNamespace != "" && a.PodName != ""
		if named {
			v.pods[a.PodNamespace+"."+a.PodName] = true
		}
		for _, ip := range a.IPs {
			if addr, ok := ParseAddr(ip); ok {
				v.addrs[addr], named = true, true
			}
		}
		if !named {
			v.podBlind++
		}
	}
	return v
}

// ParseAddr reads an address given as a prefix or bare (record.ParseAddr).
func ParseAddr(s string) (netip.Addr, bool) { return record.ParseAddr(s) }

// Covers says whether the view speaks for node. A nil view covers none.
func (v *View) Covers(node string) bool {
	return v != nil && (v.Node == "" || v.Node == node)
}

// ListsAttachment says whether the container's interface runs. A view
// that names containers only says so for every interface of a listed
// container; one that names no containers, for every attachment.
func (v *View) ListsAttachment(containerID, ifname string) bool {
	if v.PodsOnly {
		return true
	}
	if v.ContainersOnly {
		return v.containers[containerID]
	}
	return v.attach[[2]string{containerID, ifname}]
}

// ProvesRunning says whether the view positively shows that the record's
// attachment runs and holds addr, as a re-claim needs: ListsAttachment
// answers yes for every attachment of a view that names no containers,
// which keeps records from looking gone but proves nothing. From the pods
// API it takes the record's pod, with the same UID (a recreated
// StatefulSet pod keeps its name, not its UID), reporting addr in its
// status.
func (v *View) ProvesRunning(rec *record.Record, addr netip.Addr) bool {
	if !v.PodsOnly {
		return v.ListsAttachment(rec.ContainerID, rec.IfName)
	}
	if rec.PodUID == "" {
		return false
	}
	for _, a := range v.Attachments {
		if a.PodUID != rec.PodUID || a.PodNamespace != rec.PodNamespace || a.PodName != rec.PodName {
			continue
		}
		for _, ip := range a.IPs {
			if got, ok := ParseAddr(ip); ok && got == addr {
				return true
			}
		}
	}
	return false
}

// ListsContainer says whether any interface of the container runs. A
// view that names no containers says so of every container.
func (v *View) ListsContainer(containerID string) bool {
	return v.PodsOnly || v.containers[containerID]
}

// ListsPod says whether a container of pod "namespace.name" runs.
func (v *View) ListsPod(namespaceDotName string) bool { return v.pods[namespaceDotName] }

// ListsAddr says whether a running attachment holds addr.
func (v *View) ListsAddr(addr netip.Addr) bool { return v.addrs[addr] }

// PodNamesGap says why the view cannot speak for pod names, or "". A
// pod-name handle's pod is gone only if no running container belongs to
// it; an entry that names neither its pod nor its addresses could be that
// container, so the pod's absence from the view proves nothing.
func (v *View) PodNamesGap() string {
	if v.podBlind == 0 {
		return ""
	}
	return fmt.Sprintf("%s cannot speak for pod names: %d of its %d entries carry neither podNamespace and podName nor ips",
		v.Source, v.podBlind, len(v.Attachments))
}

// NeedContainers refuses a view that names no containers for a command
// (gc, adopt) that can act only on attachments it can name: from the pods
// API, every record would look running (gc) or nameless (adopt).
func (v *View) NeedContainers(command string) error {
	if v.PodsOnly {
		return NeedsContainers(v.Source, command)
	}
	return nil
}

// ReadChosen reads the source a command chose. It returns a nil view with
// a note when there is no liveness: no source chosen (src nil), or a
// default source the operator did not name (required false) that cannot
// be read. A source the operator named must be read: its failure is an
// error, never "nothing runs".
func ReadChosen(ctx context.Context, src Source, required bool) (*View, string, error) {
	if src == nil {
		return nil, "none", nil
	}
	v, err := src.Read(ctx)
	if err != nil {
		if required {
			return nil, "", err
		}
		return nil, fmt.Sprintf("none (%v)", err), nil
	}
	return v, "", nil
}

// Listing is the view as the rulebook's witness. A view that speaks for
// one node was read on this machine (its runtime, its CNI cache, a file
// for it), so it says nothing of what another machine under the same
// Calico node name runs: records another host wrote are never judged by
// it. A view for every node (a --live file with --node "") names
// attachments cluster-wide and is bound to no machine. Every source may
// lag behind an ADD that just returned.
func (v *View) Listing() *rulebook.Listing {
	if v == nil {
		return nil
	}
	l := &rulebook.Listing{Source: v.Source, Node: v.Node, Entries: len(v.Attachments), Lags: true,
		Attachment: v.ListsAttachment, Container: v.ListsContainer, Pod: v.ListsPod, Addr: v.ListsAddr, PodNamesGap: v.PodNamesGap()}
	switch {
	case v.PodsOnly:
		l.Names = rulebook.Pods
	case v.ContainersOnly:
		l.Names = rulebook.Containers
	}
	if v.Node != "" {
		l.Host = record.ThisHost()
	}
	return l
}
