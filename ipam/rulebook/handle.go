package rulebook

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Generation is how a handle is keyed, which says who owns it.
type Generation int

const (
	// ContainerKeyed: "<network>.<containerID>" or a bare container ID
	// (Calico 3.x, and every handle safe-ipam makes calico-ipam use).
	ContainerKeyed Generation = iota
	// PodNameKeyed: Calico 2.x's "namespace.podname", which any DEL of a
	// container of that pod name frees.
	PodNameKeyed
	// VMKeyed: a KubeVirt VM's handle, which Calico keeps across the VM's
	// pods and frees itself once the VM is gone.
	VMKeyed
	// Unnamed: a handle that names no container of a known network.
	Unnamed
)

// Alloc is one address a handle holds.
type Alloc struct {
	Addr netip.Addr
	// Node is the node Calico's owner attributes name, "" when Calico
	// wrote none (Calico 2.x). A block's affinity is not an allocation's
	// node: a pod on another node may borrow an address from the block.
	Node string
	// Time is the owner attributes' timestamp; zero when absent.
	Time time.Time
}

// HandleCase is what the audit knows of a handle no record holds (or a
// pod-name handle, recorded or not) when repair would release it.
type HandleCase struct {
	Generation Generation
	// Owner is the pod ("namespace.name") or container the handle names.
	Owner  string
	Allocs []Alloc
	// RecordsOf is the one node whose records were read ("" for all): a
	// container handle allocated on another node may have a record there.
	RecordsOf string
	Listing   *Listing
	// MinAge: an allocation younger than this may be an ADD still at work.
	// SettledFor is how long repair waited and re-read before acting: an
	// allocation without a timestamp is judged only when it is MinAge.
	MinAge, SettledFor time.Duration
	Now                time.Time
}

// HandleVerdict is the rulebook's answer for a handle: Release; or Live
// (the listing lists its owner or one of its addresses); or Unjudged, why
// no witness can speak for it.
type HandleVerdict struct {
	Verdict
	Live     bool
	Unjudged string
}

// Handle judges a handle's allocations. The rules, in order:
//
//	H1 a VM's handle                                   never (judged by its VM)
//	H2 names no container of a known network           unjudged
//	H3 container-keyed, allocated on a node whose
//	   records were not read (or on no known node)     unjudged
//	H4 an allocation on a node the listing does not
//	   cover (no owner attributes: no known node)      unjudged
//	H5 pod-name-keyed, the listing cannot name pods    unjudged
//	H6 an allocation of unknown age (not settled for
//	   MinAge) or younger than MinAge                  unjudged
//	H7 the listing lists its owner or an address       live
//	otherwise                                          release
func Handle(c HandleCase) HandleVerdict {
	if why := c.unjudged(); why != "" {
		return HandleVerdict{Verdict: keep("%s", why), Unjudged: why}
	}
	l := c.Listing
	for _, al := range c.Allocs {
		if l.listsAddr(al.Addr) {
			return HandleVerdict{Verdict: keep("%s lists %s as running", l.Source, al.Addr), Live: true}
		}
	}
	if c.Generation == PodNameKeyed && l.listsPod(c.Owner) || c.Generation == ContainerKeyed && l.listsContainer(c.Owner) {
		return HandleVerdict{Verdict: keep("%s lists owner %s", l.Source, c.Owner), Live: true}
	}
	return HandleVerdict{Verdict: release("%s does not list owner %s", l.Source, c.Owner)}
}

func (c HandleCase) unjudged() string {
	l := c.Listing
	switch {
	case c.Generation == VMKeyed:
		return "judged by its VM, which this audit does not read: never released by repair"
	case c.Generation == Unnamed:
		return "the handle names no container of a known network (pass --network), so liveness cannot speak for it"
	case l == nil:
		return "no liveness source: an unknown set of running pods never means none run"
	}
	if c.Generation == ContainerKeyed && c.RecordsOf != "" {
		for _, al := range c.Allocs {
			if al.Node != c.RecordsOf {
				return fmt.Sprintf("safe-ipam's records of node %q are not read here (the store read holds node %s's only)", al.Node, c.RecordsOf)
			}
		}
	}
	for _, al := range c.Allocs {
		switch {
		case al.Node == "" && !l.Covers(""):
			return fmt.Sprintf("Calico names no owner node for %s (a block's affinity is not its node: a pod on another node may have borrowed it), and %s speaks for node %s only", al.Addr, l.Source, l.Node)
		case !l.Covers(al.Node):
			return "no liveness source covers its node: cannot tell a leak from a pod not behind safe-ipam"
		}
	}
	if c.Generation == PodNameKeyed && l.PodNamesGap != "" {
		return l.PodNamesGap
	}
	for _, al := range c.Allocs {
		if al.Time.IsZero() && c.SettledFor < c.MinAge {
			return fmt.Sprintf("allocated with no timestamp, so its age is unknown: only repair --apply with --settle of at least --min-age (%s) judges it", c.MinAge)
		}
		if !al.Time.IsZero() && c.Now.Sub(al.Time) < c.MinAge {
			return fmt.Sprintf("allocated %s ago: its ADD may still be running", c.Now.Sub(al.Time).Round(time.Second))
		}
	}
	return ""
}

// OwnHandle says whether rec's handle is its own container's ("<network>.<containerID>",
// or the bare container ID safe-ipam has Calico 2.x key by): what Calico
// holds under it is that container's alone, so once the rulebook lets
// the record go, releasing the handle with it frees no one else's. A
// pod-name or VM handle outlives the container: it is judged by pod or
// by VM (Handle).
func OwnHandle(rec *record.Record) bool {
	return rec.Handle == rec.Network+"."+rec.ContainerID || rec.Handle == rec.ContainerID
}

// PodHandleOwner says why the owner attributes Calico keeps for an
// address under rec's pod-name handle do not prove the address rec's
// ("" when they do). Any DEL by pod name frees every address under the
// handle, and another incarnation of the pod (on another node, or handed
// the same address again) may hold one under the same name. byRuntime
// is a DEL the runtime sent for this very container: attributes that
// name no owner (Calico 2.x) are then judged by the address; a
// collection, acting on its own judgment, needs the attributes to name
// the record's pod on the record's node.
func PodHandleOwner(owner map[string]string, rec *record.Record, byRuntime bool) string {
	switch {
	case len(owner) == 0 && byRuntime:
		return ""
	case len(owner) == 0:
		return "Calico records no owner for it (Calico 2.x): nothing shows it is not a later incarnation's"
	case owner["namespace"] != rec.PodNamespace || owner["pod"] != rec.PodName:
		return fmt.Sprintf("Calico names its owner %s/%s", owner["namespace"], owner["pod"])
	case rec.Node == "" || owner["node"] != rec.Node:
		return fmt.Sprintf("Calico allocated it on node %q, not the record's node %q: another incarnation's", owner["node"], rec.Node)
	}
	return ""
}
