package audit

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// delegateHandles, as the records and Calico's data show it, can be set for
// the wrong Calico generation. The handle Calico used for a record's
// address tells.
const (
	podModeOn3x       = "pod"       // records keyed <containerID>, Calico keyed <network>.<containerID>
	containerModeOn2x = "container" // records keyed <network>.<containerID>, Calico keyed namespace.podname
)

// ownedHandles are the delegate handles a record's DEL releases. In pod
// mode safe-ipam strips the pod's identity on ADD and DEL, so a Calico
// 3.x calico-ipam keys the address <network>.<containerID>, and its DEL
// releases that handle as well as the bare container ID.
// A record also owns the handles of the allocations quarantined with it,
// which its DEL releases too.
func ownedHandles(rec *record.Record) []string {
	handles := []string{rec.Handle}
	if rec.Handle == rec.ContainerID {
		handles = append(handles, rec.Network+"."+rec.ContainerID)
	}
	for _, q := range rec.Quarantined {
		handles = append(handles, q.Network+"."+q.ContainerID, q.ContainerID)
	}
	return handles
}

func owns(rec *record.Record, handle string) bool {
	for _, h := range ownedHandles(rec) {
		if h == handle {
			return true
		}
	}
	return false
}

// modeMismatch names the wrong delegateHandles setting that a record's
// addresses would show if Calico held them under handle, with that
// handle, or "".
func modeMismatch(rec *record.Record) (mode, handle string) {
	switch {
	case rec.Handle == rec.ContainerID:
		return podModeOn3x, rec.Network + "." + rec.ContainerID
	case rec.PodNamespace != "":
		return containerModeOn2x, rec.PodNamespace + "." + rec.PodName
	}
	return "", ""
}

// ModeWarnings warns when the records show delegateHandles set for the
// other Calico generation than the calico-ipam that answered.
func ModeWarnings(snap *snapshot.Snapshot) []string {
	// Which handle holds each address is looked up only when some record's
	// other-generation handle exists at all: a map of a million
	// addresses was the audit's last and highest peak of memory. A
	// snapshot built by hand numbers no handle, so it is looked up always.
	var byAddr map[netip.Addr]string
	numbered := snap.HandleSlots() > 0
	counts := map[string][]string{}
	for _, rec := range snap.Records {
		if rec.State != record.Committed {
			continue
		}
		m, handle := modeMismatch(rec)
		if m == "" {
			continue
		}
		if _, named := snap.HandleSlot(handle); numbered && !named {
			continue
		}
		if byAddr == nil {
			byAddr = addressHandles(snap)
		}
		for _, ip := range rec.IPs {
			if p, err := netip.ParsePrefix(ip); err == nil && byAddr[p.Addr()] == handle {
				counts[m] = append(counts[m], rec.Attachment.String())
				break
			}
		}
	}
	var out []string
	// Pod mode hides the pod from calico-ipam, which then keys every
	// record <network>.<containerID>, whether it is Calico 3.x or a build
	// that keys by pod name when it sees the pod (container mode would
	// leak with that one). Only allocations calico-ipam made with the pod
	// in view tell them apart.
	byContainer, byPodName := keyingEvidence(snap)
	if recs := counts[podModeOn3x]; len(recs) > 0 && byContainer > 0 && byPodName == 0 {
		out = append(out, fmt.Sprintf(`delegateHandles is "pod", but calico-ipam keyed %d record(s) (%s) by <network>.<containerID>, and %d allocation(s) it made with the pod in view by container too, as Calico 3.x does. `+
			`Pod mode is only for a calico-ipam that keys by pod name (Calico 2.x): it hides the pod's namespace and name from calico-ipam on ADD, so Calico 3.x cannot apply IP pools selected by namespace and writes no pod attributes. Set delegateHandles to "container"`,
			len(recs), sample(recs), byContainer))
	}
	if recs := counts[containerModeOn2x]; len(recs) > 0 {
		out = append(out, fmt.Sprintf(`delegateHandles is "container", but calico-ipam keyed %d record(s) (%s) by namespace.podname, as Calico 2.x does. `+
			`safe-ipam's DEL cannot release those handles, so their addresses leak. Set delegateHandles to "pod" while calico-ipam is 2.x`,
			len(recs), sample(recs)))
	}
	return out
}

// addressHandles maps each allocated address to its handle.
func addressHandles(snap *snapshot.Snapshot) map[netip.Addr]string {
	byAddr := make(map[netip.Addr]string, snap.Allocations.Len())
	for _, al := range snap.Allocations.All() {
		byAddr[al.Addr] = al.Handle
	}
	return byAddr
}

// sample names a few records, enough to find them.
func sample(recs []string) string {
	if len(recs) > 3 {
		return strings.Join(recs[:3], ", ") + ", ..."
	}
	return strings.Join(recs, ", ")
}

// keyingEvidence counts the allocations calico-ipam made with the pod in
// view (its attributes name the pod): under a handle other than the
// pod's name (it keys by container, as Calico 3.x does), or under
// namespace.podname (as Calico 2.x does). A KubeVirt VM's handle says
// neither.
func keyingEvidence(snap *snapshot.Snapshot) (byContainer, byPodName int) {
	for _, al := range snap.Allocations.All() {
		if al.Namespace == "" || al.Pod == "" || calico.IsVMHandle(al.Handle) {
			continue
		}
		if al.Handle == al.Namespace+"."+al.Pod {
			byPodName++
		} else {
			byContainer++
		}
	}
	return byContainer, byPodName
}
