// Package audit judges a snapshot of Calico's IPAM data and safe-ipam's
// records and finds what operators used to hunt for by hand: pod-name
// handles, addresses freed under a live record, addresses held twice,
// leaks, orphan records and inconsistent documents. It is `safe-ipam
// audit`; repair acts only on what it proves.
package audit

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/calico"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Kind names a finding.
type Kind string

// Finding kinds. Unverified is informational: it does not make the audit
// exit 1.
const (
	PodNameHandle Kind = "pod-name-handle"
	EarlyRelease  Kind = "early-release"
	Duplicate     Kind = "duplicate"
	Leak          Kind = "leak"
	OrphanRecord  Kind = "orphan-record"
	Inconsistent  Kind = "inconsistent"
	Unverified    Kind = "unverified"
	// Quarantine is informational: an address freed behind a running
	// attachment's back was given to another ADD, and safe-ipam kept it
	// allocated, tied to the running one, instead of handing it out.
	Quarantine Kind = "quarantine"
)

// Finding is one thing wrong (or not provable) in the data.
type Finding struct {
	Kind    Kind     `json:"kind"`
	Address string   `json:"address,omitempty"`
	Handle  string   `json:"handle,omitempty"`
	Block   string   `json:"block,omitempty"`
	Node    string   `json:"node,omitempty"`
	Records []string `json:"records,omitempty"`
	// Count is how many addresses the handle holds (pod-name-handle, leak).
	Count int    `json:"count,omitempty"`
	Why   string `json:"why"`
	// Releasable: a liveness source covering the node says the owner is
	// not running, so repair may release the addresses.
	Releasable bool `json:"releasable,omitempty"`
	// Unjudged says why liveness could not judge the owner (pod-name
	// handles; unverified findings say it in Why).
	Unjudged string `json:"unjudged,omitempty"`
}

// Options tune the analysis.
type Options struct {
	// Networks are the CNI network names in use; a handle "<network>.<x>"
	// is container-keyed. Networks of records are added automatically.
	Networks []string
	// Liveness says what runs; nil means unknown.
	Liveness *liveness.View
	// MinAge: an allocation younger than this may belong to an ADD still
	// running (the runtime lists an attachment only once ADD returns).
	MinAge time.Duration
	// SettledFor is how long repair waits and re-reads liveness before it
	// acts (0 for audit). An allocation without a timestamp (Calico 2.x
	// wrote none) has an unknown age, so it is judged only when that wait
	// is at least MinAge.
	SettledFor time.Duration
	Now        time.Time
}

// analysis holds the indexes one audit builds from a snapshot.
type analysis struct {
	snap     *snapshot.Snapshot
	opts     Options
	networks map[string]bool
	// addrs numbers every address allocated or recorded; allocAt is the
	// allocation of each, or -1.
	addrs   addrIndex
	allocAt []int32
	// byHandle (allocations) and recByHdl (records) are by handle key,
	// recByAddr (committed records) by address number.
	byHandle, recByHdl, recByAddr chains
	otherHandles                  map[string]int
	otherIDs                      []string
	// marked are the handle keys of allocations the store keeps
	// quarantined for holders it cannot read (snapshot.RemoteMark).
	marked map[int]bool
	one    [1]*record.Record // recordsHere's list of one
	// listing is the liveness source as the rulebook's witness.
	listing  *rulebook.Listing
	findings []Finding
}

// Analyze returns every finding, in a stable order.
func Analyze(snap *snapshot.Snapshot, opts Options) []Finding {
	nal, nrec := snap.Allocations.Len(), len(snap.Records)
	a := &analysis{snap: snap, opts: opts, networks: map[string]bool{"k8s-pod-network": true},
		addrs: newAddrIndex(max(nal, nrec)), allocAt: make([]int32, 0, max(nal, nrec)),
		byHandle: newChains(snap.HandleSlots(), nal), recByHdl: newChains(snap.HandleSlots(), nrec), recByAddr: newChains(0, nrec),
		otherHandles: map[string]int{}, marked: map[int]bool{}}
	for _, n := range opts.Networks {
		a.networks[n] = true
	}
	if a.opts.Now.IsZero() {
		a.opts.Now = time.Now()
	}
	a.listing = opts.Liveness.Listing()
	a.indexBlocks()
	a.indexRecords()
	// The checks only read the indexes: the records' (the longest, a
	// second of a million) runs beside the others, with findings and a
	// scratch list of its own.
	recs, indexed := *a, len(a.findings)
	recs.findings = nil
	var wg sync.WaitGroup
	wg.Go(recs.checkRecords)
	a.checkHandles()
	a.checkHandleDocs()
	a.checkAffinities()
	wg.Wait()
	// In the order the checks ran in one goroutine: ties keep it.
	a.findings = slices.Concat(a.findings[:indexed], recs.findings, a.findings[indexed:])
	sortFindings(a.findings)
	return a.findings
}

func (a *analysis) add(f Finding) { a.findings = append(a.findings, f) }

func (a *analysis) indexBlocks() {
	for key, why := range a.snap.Undecodable {
		a.add(Finding{Kind: Inconsistent, Block: key, Why: "document does not decode: " + why})
	}
	for _, b := range a.snap.Blocks {
		for _, p := range b.Problems {
			a.add(Finding{Kind: Inconsistent, Block: b.CIDR.String(), Node: b.Node, Why: p})
		}
	}
	for i, al := range a.snap.Allocations.All() {
		if prev := a.allocation(al.Addr); prev != nil {
			a.add(Finding{Kind: Inconsistent, Address: al.Addr.String(), Block: al.Block().String(), Handle: al.Handle,
				Why: fmt.Sprintf("address is allocated in two blocks (%s and %s)", prev.Block(), al.Block())})
			continue
		}
		k, _ := a.addrKey(al.Addr, true)
		a.allocAt[k] = int32(i)
		h, _ := a.handleKey(al.Handle, true)
		a.byHandle.add(h, i)
	}
}

func (a *analysis) indexRecords() {
	for _, m := range a.snap.Marks {
		a.networks[m.Attachment.Network] = true
		// The handles calico-ipam keys a stripped ADD by, as a local
		// quarantine's (ownedHandles).
		for _, h := range []string{m.Attachment.Network + "." + m.Attachment.ContainerID, m.Attachment.ContainerID} {
			if k, ok := a.handleKey(h, false); ok {
				a.marked[k] = true
			}
		}
	}
	for i, rec := range a.snap.Records {
		a.networks[rec.Network] = true
		for _, h := range ownedHandles(rec) {
			if k, ok := a.handleKey(h, false); ok { // else no allocation holds it
				a.recByHdl.add(k, i)
			}
		}
		if rec.State != record.Committed {
			continue
		}
		for _, ip := range rec.IPs {
			if p, err := netip.ParsePrefix(ip); err == nil {
				k, _ := a.addrKey(p.Addr(), true)
				a.recByAddr.add(k, i)
			}
		}
	}
}

// oneVM: the records hold the address under one KubeVirt VM's handle
// (pods of one VM, as a live migration's source and target), which
// Calico shares on purpose.
func oneVM(recs []*record.Record) bool {
	for _, r := range recs[1:] {
		if !r.Shares(recs[0]) {
			return false
		}
	}
	return true
}

func recordNames(recs []*record.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Attachment.String()
	}
	sort.Strings(out)
	return out
}

// checkRecords compares each committed record's addresses with Calico.
func (a *analysis) checkRecords() {
	for addr, k := range a.addrs.all() {
		if !a.recByAddr.has(int(k)) {
			continue
		}
		recs := a.recordsHere(int(k))
		if len(recs) > 1 && !oneVM(recs) {
			a.add(Finding{Kind: Duplicate, Address: addr.String(), Records: recordNames(recs), Node: recs[0].Node,
				Why: fmt.Sprintf("%d committed records hold the address", len(recs))})
			continue
		}
		rec := recs[0]
		al := a.allocation(addr)
		switch {
		case a.knownGone(rec):
			// A stale record: its attachment is gone, so it guards no
			// running pod; checkOrphans reports it, once.
		case al == nil:
			a.add(Finding{Kind: EarlyRelease, Address: addr.String(), Handle: rec.Handle, Records: recordNames(recs), Node: rec.Node,
				Why: "the record holds the address but Calico has it free: the next ADD can hand it out again"})
		case owns(rec, al.Handle):
			// Held under a handle the record's DEL releases.
		case a.recordHeld(al.Handle):
			a.add(Finding{Kind: Duplicate, Address: addr.String(), Handle: al.Handle, Block: al.Block().String(), Node: rec.Node,
				Records: recordNames(append(slices.Clone(recs), a.recordsByHandle(al.Handle)...)),
				Why:     fmt.Sprintf("record %s holds the address, and Calico gave it to handle %s, which another record holds", rec.Attachment, al.Handle)})
		case a.runs(rec) && a.holderRuns(al):
			a.add(Finding{Kind: Duplicate, Address: addr.String(), Handle: al.Handle, Block: al.Block().String(), Node: rec.Node, Records: recordNames(recs),
				Why: fmt.Sprintf("running %s holds the address (its record), and Calico gave it to handle %s, whose owner runs too: two running pods share it (incident 002)", rec.Attachment, al.Handle)})
		default:
			a.add(Finding{Kind: EarlyRelease, Address: addr.String(), Handle: al.Handle, Block: al.Block().String(), Records: recordNames(recs), Node: rec.Node,
				Why: fmt.Sprintf("the record holds the address under %s but Calico has it under %s", rec.Handle, al.Handle)})
		}
	}
	a.checkOrphans()
	a.checkLiveAddresses()
	a.checkQuarantines()
}

// knownGone: the rulebook would release the record: a witness that
// covers it positively does not list its attachment.
func (a *analysis) knownGone(rec *record.Record) bool { return a.recordVerdict(rec, false).Release }

// recordVerdict is the rulebook's verdict on rec on the audit's evidence:
// the liveness source, the store's kind, and --min-age as the grace.
// forget is repair's forgetting of an orphan record.
func (a *analysis) recordVerdict(rec *record.Record, forget bool) rulebook.Verdict {
	// chaos:repair-judges-another-hosts-record (a mutant breaks what follows)
	w := rulebook.Witness{Node: a.snap.RecordsNode, Shared: a.snap.RecordsShared, Listing: a.listing, Now: a.opts.Now, Grace: a.opts.MinAge, Forget: forget}
	return w.Judge(rec)
}

// runs: a covering liveness source lists the record's attachment.
func (a *analysis) runs(rec *record.Record) bool {
	l := a.opts.Liveness
	return l.Covers(rec.Node) && l.ListsAttachment(rec.ContainerID, rec.IfName)
}

// holderRuns: a covering liveness source lists the owner of the handle
// Calico holds the address under, by that owner's own name (its container,
// or its pod), never by the address, which the record's pod holds too.
func (a *analysis) holderRuns(al *snapshot.Allocation) bool {
	l := a.opts.Liveness
	if !l.Covers(al.Node) {
		return false
	}
	if a.isPodNameHandle(al.Handle, al) {
		return l.ListsPod(al.Handle)
	}
	if l.PodsOnly {
		return al.Pod != "" && l.ListsPod(al.Namespace+"."+al.Pod)
	}
	cid, ok := a.containerOf(al.Handle)
	return ok && l.ListsContainer(cid)
}

// checkQuarantines reports every quarantine with both attachments, and
// every allocation kept for a holder the store cannot read.
func (a *analysis) checkQuarantines() {
	for _, m := range a.snap.Marks {
		handle := m.Attachment.Network + "." + m.Attachment.ContainerID
		// A mark that does not decode fences, and nothing will ever
		// release it (gc reads only the marks that decode): not clean.
		f := Finding{Kind: Inconsistent, Handle: handle, Node: a.snap.RecordsNode, Records: []string{m.Attachment.String()},
			Why: fmt.Sprintf("%s's allocation is kept out of Calico's free addresses by a quarantine mark that does not decode, which no gc releases; remove the mark (q:%s:%s in the file store) and release the handle by hand only once no pod on any node runs with its address",
				m.Attachment, m.Attachment.ContainerID, m.Attachment.IfName)}
		if k, ok := a.handleKey(handle, false); ok {
			f.Address = addrList(a.allocsOf(k))
		}
		if m.Mark != nil {
			f.Kind, f.Address, f.Records = Quarantine, Addrs(m.Mark.Quarantine.IPs), []string{m.Mark.Holder.Attachment.String(), m.Attachment.String()}
			f.Why = fmt.Sprintf("the address was freed behind %s's back (node %s, AddressClaim %s) and given to %s's ADD; safe-ipam keeps it allocated under %s's handle, and gc releases it once the holder's claim stays gone for --quarantine-grace",
				m.Mark.Holder.Attachment, m.Mark.Holder.Node, m.Mark.Claim, m.Attachment, m.Attachment)
		}
		a.add(f)
	}
	for _, rec := range a.snap.Records {
		for _, q := range rec.Quarantined {
			a.add(Finding{Kind: Quarantine, Address: Addrs(q.IPs), Handle: q.Network + "." + q.ContainerID, Node: rec.Node,
				Records: []string{rec.Attachment.String(), q.Attachment.String()},
				Why: fmt.Sprintf("the address was freed behind %s's back and given to %s's ADD; safe-ipam kept it allocated under %s's handle, and releases it with %s",
					rec.Attachment, q.Attachment, q.Attachment, rec.Attachment)})
		}
	}
}

// checkLiveAddresses: an address a running attachment holds (as the
// liveness source reports it) that Calico has free is the state right
// before a duplicate, even when no record covers it.
func (a *analysis) checkLiveAddresses() {
	l := a.opts.Liveness
	if l == nil {
		return
	}
	for _, att := range l.Attachments {
		for _, ip := range att.IPs {
			addr, ok := liveness.ParseAddr(ip) // runtimes give "10.0.0.1/26", CRI and the pods API "10.0.0.1"
			if k, known := a.addrKey(addr, false); !ok || known && (a.recByAddr.has(k) || a.allocAt[k] >= 0) {
				continue // recorded (checked above) or allocated
			}
			a.add(Finding{Kind: EarlyRelease, Address: addr.String(), Node: l.Node,
				Why: fmt.Sprintf("running %s holds the address (%s) but Calico has it free", liveName(att), l.Source)})
		}
	}
}

// liveName names a running attachment by what its source knows of it.
func liveName(att liveness.Running) string {
	if att.ContainerID == "" {
		return "pod " + att.PodNamespace + "/" + att.PodName
	}
	return "container " + att.ContainerID + "/" + att.IfName
}

func (a *analysis) checkOrphans() {
	live := a.opts.Liveness
	for _, rec := range a.snap.Records {
		if !live.Covers(rec.Node) || live.ListsAttachment(rec.ContainerID, rec.IfName) {
			continue
		}
		f := Finding{Kind: OrphanRecord, Handle: rec.Handle, Node: rec.Node, Records: []string{rec.Attachment.String()},
			Address: Addrs(rec.IPs), Why: fmt.Sprintf("%s record of an attachment %s does not list", rec.State, live.Source)}
		if v := a.recordVerdict(rec, true); v.Release {
			f.Releasable = true
		} else {
			f.Unjudged = v.Why
		}
		a.add(f)
	}
}

// checkHandles classifies every handle that holds addresses.
func (a *analysis) checkHandles() {
	for k, e := range a.byHandle.last {
		if e < 0 {
			continue
		}
		// Most handles are recorded: judged without listing their
		// allocations.
		item, _ := a.byHandle.first(k)
		handle, first := a.handleID(k), a.snap.Allocations.At(int(item))
		if calicoOwned(handle, first) || a.marked[k] {
			continue // a mark's: reported by checkQuarantines
		}
		if !calico.IsVMHandle(handle) && a.recByHdl.has(k) && !a.isPodNameHandle(handle, first) {
			continue // recorded: checked against the record
		}
		allocs := a.allocsOf(k)
		if calico.IsVMHandle(handle) && !a.recByHdl.has(k) {
			f := Finding{Handle: handle, Count: len(allocs), Node: first.Node, Address: addrList(allocs), Block: first.Block().String()}
			f.Kind, f.Why, f.Unjudged = a.judgeVMHandle(allocs)
			a.add(f)
			continue
		}
		podName := a.isPodNameHandle(handle, first)
		if !podName && a.recByHdl.has(k) {
			continue // recorded: checked against the record
		}
		f := Finding{Handle: handle, Count: len(allocs), Node: first.Node, Address: addrList(allocs), Block: first.Block().String()}
		f.Kind, f.Why, f.Releasable, f.Unjudged = a.judgeHandle(handle, podName, allocs)
		if f.Kind != "" {
			a.add(f)
		}
	}
}

// judgeVMHandle decides what a KubeVirt VM's handle that no record holds
// is. Calico keeps it across the VM's pods and frees it once the VM is
// deleted and no pod owns it, so it is judged by its VM, which this audit
// does not read: it is never releasable. But when no pod of the VM runs
// (Calico's owner attributes name none, or only pods a covering source
// does not list), nothing will ever free it if the VM is gone (a DEL that
// never reached calico-ipam's VM branch): a leak candidate, for the
// operator to check against the VM. Otherwise it is unverified.
func (a *analysis) judgeVMHandle(allocs []*snapshot.Allocation) (kind Kind, why, unjudged string) {
	const judged = "a KubeVirt VM's handle: Calico keeps a VM's address under it across the VM's pods, so it is judged by its VM, which this audit does not read; never released"
	if owner := a.vmPodMaybeRunning(allocs); owner != "" {
		return Unverified, judged + " (" + owner + ")", ""
	}
	return Leak, "a KubeVirt VM's handle that no record holds and no running pod owns: a leak if its VM is deleted (a stopped VM keeps its address); check the VM, and release the handle in Calico only once it is gone",
		rulebook.Handle(a.handleCase(rulebook.VMKeyed, "", allocs)).Unjudged
}

// vmPodMaybeRunning says which pod Calico names as an owner of allocs
// (or alternate owner) that may run, and why, or "" when none may.
func (a *analysis) vmPodMaybeRunning(allocs []*snapshot.Allocation) string {
	l := a.opts.Liveness
	for _, al := range allocs {
		for _, owner := range []map[string]string{{"namespace": al.Namespace, "pod": al.Pod, "node": al.Node}, al.Alternate()} {
			if owner["pod"] == "" {
				continue
			}
			pod := owner["namespace"] + "/" + owner["pod"]
			switch {
			case !l.Covers(owner["node"]):
				return "its owner " + pod + " is on a node no liveness source covers"
			case l.PodNamesGap() != "":
				return "its owner " + pod + ": " + l.PodNamesGap()
			case l.ListsPod(owner["namespace"]+"."+owner["pod"]) || l.ListsAddr(al.Addr):
				return "its owner " + pod + " runs"
			case !al.Time().IsZero() && a.opts.Now.Sub(al.Time()) < a.opts.MinAge:
				return "its owner " + pod + " was given it " + a.opts.Now.Sub(al.Time()).Round(time.Second).String() + " ago: its ADD may still be running"
			}
		}
	}
	return ""
}

// judgeHandle decides what an unrecorded handle (or a pod-name handle)
// is, by the rulebook (rulebook.Handle). The last result says why the
// owner could not be judged, if so.
func (a *analysis) judgeHandle(handle string, podName bool, allocs []*snapshot.Allocation) (kind Kind, why string, dead bool, unjudged string) {
	c := a.handleCase(rulebook.PodNameKeyed, handle, allocs)
	if !podName {
		owner, named := a.containerOf(handle)
		c.Generation, c.Owner = rulebook.ContainerKeyed, owner
		if !named {
			c.Generation = rulebook.Unnamed
		}
	}
	v := rulebook.Handle(c)
	switch {
	case podName:
		return PodNameHandle, podNameWhy(c.Owner), v.Release, v.Unjudged
	case v.Unjudged != "":
		return Unverified, "no record, and " + v.Unjudged, false, ""
	case v.Live:
		return "", "", false, ""
	}
	return Leak, "no record, and " + v.Why, true, ""
}

// handleCase is the rulebook's evidence for a handle's allocations.
func (a *analysis) handleCase(gen rulebook.Generation, owner string, allocs []*snapshot.Allocation) rulebook.HandleCase {
	c := rulebook.HandleCase{Generation: gen, Owner: owner, RecordsOf: a.snap.RecordsNode, Listing: a.listing,
		MinAge: a.opts.MinAge, SettledFor: a.opts.SettledFor, Now: a.opts.Now, Allocs: make([]rulebook.Alloc, len(allocs))}
	for i, al := range allocs {
		// chaos:repair-takes-block-affinity-for-owner-node (a mutant breaks what follows)
		c.Allocs[i] = rulebook.Alloc{Addr: al.Addr, Node: al.OwnerNode(), Time: al.Time()}
	}
	return c
}

func podNameWhy(owner string) string {
	return fmt.Sprintf("keyed by pod name: any DEL of a container of pod %s can free these addresses", owner)
}

// containerOf names the container a handle belongs to:
// "<network>.<containerID>" for a known network, or a bare container ID.
func (a *analysis) containerOf(handle string) (string, bool) {
	best := ""
	for n := range a.networks {
		if strings.HasPrefix(handle, n+".") && len(n) > len(best) {
			best = n
		}
	}
	if best != "" {
		return strings.TrimPrefix(handle, best+"."), true
	}
	if !strings.Contains(handle, ".") && containerID().MatchString(handle) {
		return handle, true
	}
	return "", false
}

// calicoOwned: addresses Calico allocates for itself (tunnel addresses,
// null handles) belong to no container and are never judged.
func calicoOwned(handle string, al *snapshot.Allocation) bool {
	return handle == "" || al.Type() != "" || strings.Contains(handle, "-tunnel-addr-")
}

// The patterns compile on first use: a command that never judges a
// handle does not pay for them.
var (
	containerID = lazyRegexp(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)
	dnsLabel    = lazyRegexp(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	longHex     = lazyRegexp(`^[0-9a-f]{32,}$`)
	podNameLike = lazyRegexp(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
)

func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// isPodNameHandle tells Calico 2.x's "namespace.podname" from 3.x's
// "<network>.<containerID>" and from a bare container ID.
func (a *analysis) isPodNameHandle(handle string, al *snapshot.Allocation) bool {
	ns, pod := al.Namespace, al.Pod
	if ns != "" && pod != "" {
		return handle == ns+"."+pod
	}
	first, rest, ok := strings.Cut(handle, ".")
	if _, known := a.containerOf(handle); !ok || known || longHex().MatchString(rest) {
		return false
	}
	return dnsLabel().MatchString(first) && podNameLike().MatchString(rest)
}

// Addrs writes a record's addresses ("10.0.0.1/26", as CNI results carry
// them) in the one form a report uses for every address: bare, sorted.
func Addrs(ips []string) string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		if a, ok := record.ParseAddr(ip); ok {
			ip = a.String()
		}
		out = append(out, ip)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func addrList(allocs []*snapshot.Allocation) string {
	addrs := make([]string, len(allocs))
	for i, al := range allocs {
		addrs[i] = al.Addr.String()
	}
	sort.Strings(addrs)
	return strings.Join(addrs, ",")
}

// checkHandleDocs compares handle documents with the blocks' counts.
func (a *analysis) checkHandleDocs() {
	for k, e := range a.byHandle.last {
		if e < 0 {
			continue
		}
		handle := a.handleID(k)
		doc, ok := a.snap.Handle(handle)
		if item, only := a.byHandle.first(k); ok && only {
			// The common handle of one address, told without a list.
			if block, n, single := doc.Single(); single && n == 1 && a.snap.Allocations.At(int(item)).Block() == block {
				continue
			}
		}
		allocs := a.allocsOf(k)
		switch {
		case ok && a.oneBlockMatches(doc, allocs):
		case !ok && handle != "":
			a.add(Finding{Kind: Inconsistent, Handle: handle, Count: len(allocs), Why: "blocks allocate addresses to a handle with no handle document"})
		case ok:
			a.compareCounts(handle, doc, allocs)
		}
	}
	for handle, doc := range a.snap.Handles() {
		if k, ok := a.handleKey(handle, false); !ok || !a.byHandle.has(k) {
			a.add(Finding{Kind: Inconsistent, Handle: handle, Why: fmt.Sprintf("handle document counts %s, blocks hold nothing for it", doc.Counts())})
		}
	}
}

// oneBlockMatches is the common case, told without building maps: the
// document counts the one block that holds every address, and as many.
func (a *analysis) oneBlockMatches(doc snapshot.HandleDoc, allocs []*snapshot.Allocation) bool {
	block, n, ok := doc.Single()
	if !ok || n != len(allocs) {
		return false
	}
	for _, al := range allocs {
		if al.Block() != block {
			return false
		}
	}
	return true
}

func (a *analysis) compareCounts(handle string, doc snapshot.HandleDoc, allocs []*snapshot.Allocation) {
	c := map[string]int{}
	for _, al := range allocs {
		c[al.Block().String()]++
	}
	var counts map[string]int
	if err := json.Unmarshal(doc.Counts(), &counts); err != nil || !SameCounts(counts, c) {
		a.add(Finding{Kind: Inconsistent, Handle: handle, Count: total(c),
			Why: fmt.Sprintf("handle document counts %s, blocks hold %v", doc.Counts(), c)})
	}
}

func total(c map[string]int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// SameCounts says whether two handle counts agree, a zero count in a
// matching an absent one.
func SameCounts(a, b map[string]int) bool {
	for k, v := range a {
		if v != 0 && b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

func (a *analysis) checkAffinities() {
	for _, aff := range a.snap.Affinities {
		if _, ok := a.snap.Blocks[aff.CIDR]; !ok {
			a.add(Finding{Kind: Inconsistent, Block: aff.CIDR.String(), Node: aff.Node, Why: "host affinity for a block that does not exist"})
		}
	}
}

var kindOrder = map[Kind]int{Duplicate: 0, EarlyRelease: 1, PodNameHandle: 2, Leak: 3, OrphanRecord: 4, Inconsistent: 5, Quarantine: 6, Unverified: 7}

func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		if kindOrder[fs[i].Kind] != kindOrder[fs[j].Kind] {
			return kindOrder[fs[i].Kind] < kindOrder[fs[j].Kind]
		}
		if fs[i].Address != fs[j].Address {
			return fs[i].Address < fs[j].Address
		}
		if fs[i].Handle != fs[j].Handle {
			return fs[i].Handle < fs[j].Handle
		}
		return fs[i].Block < fs[j].Block
	})
}
