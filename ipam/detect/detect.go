// Package detect judges, from the API server's pods and Calico's
// allocations, what the continuous check reports (issue 47): two running
// pods that list one address, a pod whose Calico annotation names other
// addresses than its status, and an address Calico still holds for a pod
// gone longer than kube-controllers' leak grace. It only reports; nothing
// here releases. Evidence that is incomplete makes a check unknown, never
// clean.
package detect

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind is a finding's kind; each is a metric, an Event and a log line.
type Kind string

const (
	// SharedAddress: two running pods list one address in status.podIPs
	// (incident 002's end state, Calico issue 13858).
	SharedAddress Kind = "shared-address"
	// AnnotationMismatch: Calico's annotation of a running pod
	// (cni.projectcalico.org/podIPs, or podIP) names other addresses than
	// its status.podIPs: the pod runs with addresses Calico does not
	// record for it (issue 13858's shape).
	AnnotationMismatch Kind = "annotation-mismatch"
	// EarlyRelease: a running pod lists, in its status and Calico's
	// annotation, an address Calico's datastore does not hold for it:
	// none holds it (freed behind its back: the next ADD may be given it)
	// or an allocation names another pod (given again: a duplicate in
	// the making).
	EarlyRelease Kind = "early-release"
	// GoneOwner: Calico holds an address for a pod that has been gone
	// longer than kube-controllers' leak grace: a leak Calico's own GC
	// did not collect, or an address released late.
	GoneOwner Kind = "gone-owner"
)

// Kinds are every kind, in report order.
var Kinds = []Kind{SharedAddress, AnnotationMismatch, EarlyRelease, GoneOwner}

// Confirmed are the kinds a round reports only once a second look,
// a settle time later, finds them again (Confirm): the two listings are
// not read at one instant, and a pod's sandbox recreated, or a pod that
// starts or ends between them, looks like each for a moment. A gone
// owner is judged across periods already.
var Confirmed = []Kind{SharedAddress, AnnotationMismatch, EarlyRelease}

// DefaultLeakGrace is kube-controllers' leakGracePeriod default.
const DefaultLeakGrace = 15 * time.Minute

// Pod is what the API server says of one pod.
type Pod struct {
	Namespace, Name, UID, Node string
	// Running: bound to a node, not finished (Succeeded, Failed) and not
	// on the host's network: its status.podIPs are addresses IPAM gave.
	Running bool
	// VM names the KubeVirt VirtualMachineInstance that owns the pod
	// ("namespace/name"), "" for none: a live migration's source and
	// target run with one address on purpose.
	VM string
	// Status are status.podIPs.
	Status []netip.Addr
	// Annotated are the addresses of Calico's annotation, nil when the
	// pod has none; AnnotationErr says why one did not parse.
	Annotated     []netip.Addr
	AnnotationErr string
	// NoIPAM: the pod asks Calico for addresses of its own choosing
	// (ipAddrsNoIpam), which no allocation holds.
	NoIPAM bool
}

// Key is the pod's "namespace/name".
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// Allocation is one address Calico holds, with the owner its attributes
// name ("" when they name no pod: a node's tunnel address, Calico 2.x).
type Allocation struct {
	Addr           netip.Addr
	Handle         string
	Namespace, Pod string
	Node           string
	// AltNamespace, AltPod: a KubeVirt VM's alternate owner, the target
	// pod of a live migration, which runs with the address too.
	AltNamespace, AltPod string
}

// ownedBy says whether the allocation names the pod as its owner or its
// alternate owner.
func (al *Allocation) ownedBy(key string) bool {
	return al.Namespace+"/"+al.Pod == key || (al.AltPod != "" && al.AltNamespace+"/"+al.AltPod == key)
}

// Evidence is one period's listings. A listing that did not finish (an
// error, a page that expired, a timeout) is not complete.
type Evidence struct {
	Pods           []Pod
	PodsComplete   bool
	Allocs         []Allocation
	AllocsComplete bool
	Now            time.Time
	LeakGrace      time.Duration
	// Unannotated: Calico's datastore is etcd, where Calico writes no
	// annotation on pods: annotation-mismatch and early-release do not
	// apply (Report.NotApplicable), rather than being unknown for ever.
	Unannotated bool
}

// Finding is one thing the check reports.
type Finding struct {
	Kind    Kind
	Address netip.Addr
	// Pods are the pods involved ("namespace/name"), with their Nodes.
	Pods  []string
	Nodes []string
	Why   string
}

// Report is one period's findings, and the checks that could not be
// made, with why (each kind's state is then unknown, never clean).
type Report struct {
	Findings []Finding
	Unknown  map[Kind]string
	// Warming: gone-owner is unknown only because the memory of missing
	// owners is younger than the leak grace (a restart, a new holder of
	// the Lease): the round judged all it can yet.
	Warming bool
	// NotApplicable are kinds this datastore gives nothing to judge by
	// (Evidence.Unannotated): neither found nor unknown.
	NotApplicable []Kind
}

// Count is how many findings of k the report holds, and whether k was
// checked at all.
func (r Report) Count(k Kind) (n int, known bool) {
	if why := r.Unknown[k]; why != "" {
		return 0, false
	}
	for _, f := range r.Findings {
		if f.Kind == k {
			n++
		}
	}
	return n, true
}

// Gone remembers, across periods, since when each allocation's owner
// pod has been missing from complete listings: the API says that a pod
// is gone, never since when. A detector that starts again (a restart, a
// new holder of the Lease) starts with none: until its memory spans the
// leak grace, gone-owner is unknown, never 0.
type Gone struct {
	started time.Time
	owners  map[netip.Addr]goneSince
}

// NewGone is an empty memory, started at the first check that uses it.
func NewGone() *Gone { return &Gone{owners: map[netip.Addr]goneSince{}} }

// Len is how many allocations it remembers an owner missing for.
func (g *Gone) Len() int { return len(g.owners) }

type goneSince struct {
	owner string
	since time.Time
}

// Check judges one period's evidence. gone is updated with what this
// period saw (nil: no memory, no GoneOwner findings).
func Check(ev Evidence, gone *Gone) Report {
	r := Report{Unknown: map[Kind]string{}}
	switch {
	case !ev.PodsComplete:
		r.unknown(Kinds, "the API server's pods were not all read")
		return r
	case len(ev.Pods) == 0:
		// The check's own pod is one: a listing of none is wrong evidence.
		r.unknown(Kinds, "the API server lists no pod at all")
		return r
	}
	byKey := make(map[string]*Pod, len(ev.Pods))
	for i := range ev.Pods {
		byKey[ev.Pods[i].Key()] = &ev.Pods[i]
	}
	r.Findings = append(r.Findings, sharedAddresses(ev.Pods)...)
	annotated := slices.ContainsFunc(ev.Pods, func(p Pod) bool { return p.Running && p.Annotated != nil })
	switch {
	case !ev.AllocsComplete:
		r.unknown([]Kind{EarlyRelease, GoneOwner}, "Calico's allocations were not all read")
	case massEvidence(ev) != "":
		r.unknown([]Kind{EarlyRelease, GoneOwner}, massEvidence(ev))
	}
	if ev.Unannotated {
		r.NotApplicable = []Kind{AnnotationMismatch, EarlyRelease}
		r.unknown(r.NotApplicable, "not judged on Calico's etcd datastore, where Calico does not annotate pods")
	}
	if !annotated && slices.ContainsFunc(ev.Allocs, func(al Allocation) bool { return al.Pod != "" }) {
		// Calico annotates pods on its Kubernetes datastore only: on
		// etcd, two kinds have nothing to judge by.
		r.unknown([]Kind{AnnotationMismatch, EarlyRelease}, "no running pod carries Calico's annotation while Calico holds addresses for pods (Calico writes it on its Kubernetes datastore only)")
	}
	if r.Unknown[AnnotationMismatch] == "" {
		r.Findings = append(r.Findings, annotationMismatches(ev.Pods)...)
	}
	if r.Unknown[EarlyRelease] == "" {
		r.Findings = append(r.Findings, earlyReleases(ev)...)
	}
	switch {
	case r.Unknown[GoneOwner] != "":
	case gone == nil:
		r.Unknown[GoneOwner] = "no memory of earlier periods"
	default:
		r.Findings = append(r.Findings, goneOwners(ev, byKey, gone)...)
		if span := ev.Now.Sub(gone.started); span < leakGrace(ev) {
			r.Warming = true
			r.Unknown[GoneOwner] = fmt.Sprintf("the memory of missing owners spans %s of the leak grace %s (a restart, or a new holder of the Lease)", span.Round(time.Second), leakGrace(ev))
		}
	}
	return r
}

func (r *Report) unknown(kinds []Kind, why string) {
	for _, k := range kinds {
		if r.Unknown[k] == "" {
			r.Unknown[k] = why
		}
	}
}

func leakGrace(ev Evidence) time.Duration {
	if ev.LeakGrace <= 0 {
		return DefaultLeakGrace
	}
	return ev.LeakGrace
}

// Confirm is first with its Confirmed findings kept only where second,
// the same check a settle time later (without the memory of periods),
// makes them again, on the same address and pods. A confirmed kind
// second could not judge is unknown.
func Confirm(first, second Report) Report {
	out := first // its Warming and NotApplicable too: the first look judged those
	out.Unknown, out.Findings = maps.Clone(first.Unknown), nil
	for _, k := range Confirmed {
		if why := second.Unknown[k]; why != "" && out.Unknown[k] == "" {
			out.Unknown[k] = "the second look: " + why
		}
	}
	again := map[string]bool{}
	for _, f := range second.Findings {
		again[f.key()] = true
	}
	for _, f := range first.Findings {
		if slices.Contains(Confirmed, f.Kind) && (out.Unknown[f.Kind] != "" || !again[f.key()]) {
			continue
		}
		out.Findings = append(out.Findings, f)
	}
	return out
}

func (f Finding) key() string {
	return fmt.Sprintf("%s %s %v", f.Kind, f.Address, f.Pods)
}

// Suspects says whether r holds a finding that Confirm would judge.
func (r Report) Suspects() bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return slices.Contains(Confirmed, f.Kind) })
}

// earlyReleases: a running pod whose status and Calico's annotation both
// list an address (Calico gave it) that no allocation holds, or one
// holds for another pod. An allocation that names no pod (a tunnel
// address, Calico 2.x) is not judged.
func earlyReleases(ev Evidence) []Finding {
	byAddr := make(map[netip.Addr]*Allocation, len(ev.Allocs))
	for i := range ev.Allocs {
		byAddr[ev.Allocs[i].Addr] = &ev.Allocs[i]
	}
	var out []Finding
	for i := range ev.Pods {
		p := &ev.Pods[i]
		if !p.Running || p.Annotated == nil || p.NoIPAM {
			continue
		}
		for _, a := range p.Status {
			if !slices.Contains(p.Annotated, a) {
				continue // annotation-mismatch's
			}
			why := ""
			switch al, held := byAddr[a]; {
			case !held:
				why = fmt.Sprintf("%s runs with %s, which Calico's datastore does not hold: freed behind its back, the next pod start may be given it", p.Key(), a)
			case al.Pod != "" && !al.ownedBy(p.Key()):
				why = fmt.Sprintf("%s runs with %s, which Calico holds under %s for %s/%s: given again", p.Key(), a, al.Handle, al.Namespace, al.Pod)
			}
			if why != "" {
				out = append(out, Finding{Kind: EarlyRelease, Address: a, Pods: []string{p.Key()}, Nodes: []string{p.Node}, Why: why})
			}
		}
	}
	return sorted(out)
}

// massEvidence says why the listings, each read whole, still cannot be
// what runs (incident 003): no pod at all while Calico holds addresses
// for pods, or no allocation at all while running pods carry Calico's
// annotation (a snapshot of the wrong datastore); "" when neither.
func massEvidence(ev Evidence) string {
	named := slices.ContainsFunc(ev.Allocs, func(al Allocation) bool { return al.Pod != "" })
	annotated := slices.ContainsFunc(ev.Pods, func(p Pod) bool { return p.Running && p.Annotated != nil })
	switch {
	case len(ev.Pods) == 0 && named:
		return "the API server lists no pod while Calico holds addresses for pods: never taken as every owner gone"
	case len(ev.Allocs) == 0 && annotated:
		return "Calico's datastore holds no allocation while running pods carry Calico's annotation: the wrong datastore?"
	}
	return ""
}

// sharedAddresses: an address that two running pods list, but for the
// pods of one VM (a live migration).
func sharedAddresses(pods []Pod) []Finding {
	holders := map[netip.Addr][]*Pod{}
	for i := range pods {
		p := &pods[i]
		if !p.Running {
			continue
		}
		for _, a := range p.Status {
			holders[a] = append(holders[a], p)
		}
	}
	var out []Finding
	for addr, ps := range holders {
		if len(ps) < 2 || oneVM(ps) {
			continue
		}
		f := Finding{Kind: SharedAddress, Address: addr}
		for _, p := range ps {
			f.Pods, f.Nodes = append(f.Pods, p.Key()), append(f.Nodes, p.Node)
		}
		f.Why = fmt.Sprintf("%d running pods list %s in status.podIPs: %s", len(ps), addr, strings.Join(f.Pods, ", "))
		out = append(out, f)
	}
	return sorted(out)
}

func oneVM(ps []*Pod) bool {
	for _, p := range ps {
		if p.VM == "" || p.VM != ps[0].VM {
			return false
		}
	}
	return true
}

// annotationMismatches: a running pod whose Calico annotation and status
// both name addresses, and not the same ones. A pod whose status names
// none yet is in its start; one without the annotation is not Calico's.
func annotationMismatches(pods []Pod) []Finding {
	var out []Finding
	for i := range pods {
		p := &pods[i]
		if !p.Running || len(p.Status) == 0 {
			continue
		}
		switch {
		case p.AnnotationErr != "":
			out = append(out, Finding{Kind: AnnotationMismatch, Address: p.Status[0], Pods: []string{p.Key()}, Nodes: []string{p.Node},
				Why: fmt.Sprintf("Calico's annotation of %s does not parse (%s); status.podIPs %v", p.Key(), p.AnnotationErr, p.Status)})
		case p.Annotated != nil && !sameSet(p.Annotated, p.Status):
			out = append(out, Finding{Kind: AnnotationMismatch, Address: p.Status[0], Pods: []string{p.Key()}, Nodes: []string{p.Node},
				Why: fmt.Sprintf("Calico's annotation of %s names %v, its status.podIPs %v", p.Key(), p.Annotated, p.Status)})
		}
	}
	return sorted(out)
}

func sameSet(a, b []netip.Addr) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, netip.Addr.Compare)
	slices.SortFunc(y, netip.Addr.Compare)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

// goneOwners: an allocation whose owner pod complete listings have
// missed for longer than the leak grace. As kube-controllers judges it,
// the owner holds the address only as the pod of that name on the
// allocation's node whose status lists the address, or lists none yet
// (its ADD at work): a StatefulSet pod recreated elsewhere, or with
// another address, does not hide its former incarnation's leak.
func goneOwners(ev Evidence, byKey map[string]*Pod, gone *Gone) []Finding {
	grace := leakGrace(ev)
	if gone.started.IsZero() {
		gone.started = ev.Now
	}
	seen := map[netip.Addr]bool{}
	var out []Finding
	for _, al := range ev.Allocs {
		if al.Pod == "" {
			continue
		}
		owner := al.Namespace + "/" + al.Pod
		if p, ok := byKey[owner]; ok && holds(p, al) {
			continue
		}
		seen[al.Addr] = true
		g, ok := gone.owners[al.Addr]
		if !ok || g.owner != owner {
			g = goneSince{owner: owner, since: ev.Now}
			gone.owners[al.Addr] = g
		}
		if missing := ev.Now.Sub(g.since); missing >= grace {
			out = append(out, Finding{Kind: GoneOwner, Address: al.Addr, Pods: []string{owner}, Nodes: []string{al.Node},
				Why: fmt.Sprintf("Calico holds %s under %s for %s, missing from the API server for %s (kube-controllers' leak grace %s)",
					al.Addr, al.Handle, owner, missing.Round(time.Second), grace)})
		}
	}
	for addr := range gone.owners {
		if !seen[addr] {
			delete(gone.owners, addr) // released, or its owner is back
		}
	}
	return sorted(out)
}

// holds says whether p, the pod an allocation names, is its owner.
func holds(p *Pod, al Allocation) bool {
	return (al.Node == "" || p.Node == al.Node) && (len(p.Status) == 0 || slices.Contains(p.Status, al.Addr))
}

func sorted(fs []Finding) []Finding {
	sort.Slice(fs, func(i, j int) bool { return fs[i].Address.Less(fs[j].Address) })
	return fs
}
