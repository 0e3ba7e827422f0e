package audit

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/record"
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
}

// Options tune the analysis.
type Options struct {
	// Networks are the CNI network names in use; a handle "<network>.<x>"
	// is container-keyed. Networks of records are added automatically.
	Networks []string
	// Liveness says what runs; nil means unknown.
	Liveness *Liveness
}

// allocation is one allocated address in Calico's blocks.
type allocation struct {
	addr      netip.Addr
	block     netip.Prefix
	ordinal   int
	handle    string
	secondary map[string]string
	node      string
}

// analysis holds the indexes one audit builds from a snapshot.
type analysis struct {
	snap      *Snapshot
	opts      Options
	networks  map[string]bool
	byAddr    map[netip.Addr]*allocation
	byHandle  map[string][]*allocation
	recByAddr map[netip.Addr][]*record.Record
	recByHdl  map[string][]*record.Record
	findings  []Finding
}

// Analyze returns every finding, in a stable order.
func Analyze(snap *Snapshot, opts Options) []Finding {
	a := &analysis{snap: snap, opts: opts, networks: map[string]bool{"k8s-pod-network": true},
		byAddr: map[netip.Addr]*allocation{}, byHandle: map[string][]*allocation{},
		recByAddr: map[netip.Addr][]*record.Record{}, recByHdl: map[string][]*record.Record{}}
	for _, n := range opts.Networks {
		a.networks[n] = true
	}
	a.indexBlocks()
	a.indexRecords()
	a.checkRecords()
	a.checkHandles()
	a.checkHandleDocs()
	a.checkAffinities()
	sortFindings(a.findings)
	return a.findings
}

func (a *analysis) add(f Finding) { a.findings = append(a.findings, f) }

func (a *analysis) indexBlocks() {
	for _, doc := range a.snap.Blocks {
		b := doc.Block
		node, _ := b.AffinityNode()
		a.checkPartition(doc)
		for ord := range b.Allocations {
			attr, ok := b.Attribute(ord)
			if !ok {
				continue
			}
			ip, err := b.IP(ord)
			if err != nil {
				continue
			}
			al := &allocation{addr: ip, block: b.CIDR, ordinal: ord, handle: attr.Handle(), secondary: attr.Secondary, node: node}
			if n := attr.Secondary["node"]; n != "" {
				al.node = n
			}
			if prev, dup := a.byAddr[ip]; dup {
				a.add(Finding{Kind: Inconsistent, Address: ip.String(), Block: b.CIDR.String(), Handle: al.handle,
					Why: fmt.Sprintf("address is allocated in two blocks (%s and %s)", prev.block, b.CIDR)})
				continue
			}
			a.byAddr[ip] = al
			a.byHandle[al.handle] = append(a.byHandle[al.handle], al)
		}
	}
}

// checkPartition: every ordinal is either allocated (to an existing
// attribute) or on the free list, exactly once.
func (a *analysis) checkPartition(doc *BlockDoc) {
	b := doc.Block
	seen := make([]int, len(b.Allocations))
	for ord, idx := range b.Allocations {
		if idx != nil {
			seen[ord]++
			if *idx < 0 || *idx >= len(b.Attributes) {
				a.add(Finding{Kind: Inconsistent, Block: b.CIDR.String(), Why: fmt.Sprintf("ordinal %d points at attribute %d of %d", ord, *idx, len(b.Attributes))})
			}
		}
	}
	for _, ord := range b.Unallocated {
		if ord < 0 || ord >= len(seen) {
			a.add(Finding{Kind: Inconsistent, Block: b.CIDR.String(), Why: fmt.Sprintf("free list holds ordinal %d outside the block", ord)})
			continue
		}
		seen[ord]++
	}
	var bad []string
	for ord, n := range seen {
		if n != 1 {
			bad = append(bad, fmt.Sprintf("%d(x%d)", ord, n))
		}
	}
	if len(bad) > 0 {
		a.add(Finding{Kind: Inconsistent, Block: b.CIDR.String(),
			Why: "allocations and unallocated do not partition the block; ordinals " + strings.Join(bad, ",")})
	}
}

func (a *analysis) indexRecords() {
	for _, rec := range a.snap.Records {
		a.networks[rec.Network] = true
		a.recByHdl[rec.Handle] = append(a.recByHdl[rec.Handle], rec)
		if rec.State != record.Committed {
			continue
		}
		for _, ip := range rec.IPs {
			if p, err := netip.ParsePrefix(ip); err == nil {
				a.recByAddr[p.Addr()] = append(a.recByAddr[p.Addr()], rec)
			}
		}
	}
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
	for addr, recs := range a.recByAddr {
		if len(recs) > 1 {
			a.add(Finding{Kind: Duplicate, Address: addr.String(), Records: recordNames(recs), Node: recs[0].Node,
				Why: fmt.Sprintf("%d committed records hold the address", len(recs))})
			continue
		}
		rec := recs[0]
		al := a.byAddr[addr]
		switch {
		case al == nil:
			a.add(Finding{Kind: EarlyRelease, Address: addr.String(), Handle: rec.Handle, Records: recordNames(recs), Node: rec.Node,
				Why: "the record holds the address but Calico has it free: the next ADD can hand it out again"})
		case al.handle != rec.Handle && len(a.recByHdl[al.handle]) > 0:
			a.add(Finding{Kind: Duplicate, Address: addr.String(), Handle: al.handle, Block: al.block.String(), Node: rec.Node,
				Records: recordNames(append(slices.Clone(recs), a.recByHdl[al.handle]...)),
				Why:     fmt.Sprintf("record %s holds the address, and Calico gave it to handle %s, which another record holds", rec.Attachment, al.handle)})
		case al.handle != rec.Handle:
			a.add(Finding{Kind: EarlyRelease, Address: addr.String(), Handle: al.handle, Block: al.block.String(), Records: recordNames(recs), Node: rec.Node,
				Why: fmt.Sprintf("the record holds the address under %s but Calico has it under %s", rec.Handle, al.handle)})
		}
	}
	a.checkOrphans()
	a.checkLiveAddresses()
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
			addr, err := netip.ParsePrefix(ip)
			if err != nil || len(a.recByAddr[addr.Addr()]) > 0 || a.byAddr[addr.Addr()] != nil {
				continue // recorded (checked above) or allocated
			}
			a.add(Finding{Kind: EarlyRelease, Address: addr.Addr().String(), Node: l.Node,
				Why: fmt.Sprintf("running container %s/%s holds the address (%s) but Calico has it free", att.ContainerID, att.IfName, l.Source)})
		}
	}
}

func (a *analysis) checkOrphans() {
	live := a.opts.Liveness
	for _, rec := range a.snap.Records {
		if !live.Covers(rec.Node) || live.attach[[2]string{rec.ContainerID, rec.IfName}] {
			continue
		}
		a.add(Finding{Kind: OrphanRecord, Handle: rec.Handle, Node: rec.Node, Records: []string{rec.Attachment.String()},
			Address: strings.Join(rec.IPs, ","), Why: fmt.Sprintf("%s record of an attachment %s does not list", rec.State, live.Source)})
	}
}

// checkHandles classifies every handle that holds addresses.
func (a *analysis) checkHandles() {
	for handle, allocs := range a.byHandle {
		first := allocs[0]
		if calicoOwned(handle, first.secondary) {
			continue
		}
		podName := a.isPodNameHandle(handle, first.secondary)
		recorded := len(a.recByHdl[handle]) > 0
		owner, ownerLive, known := a.ownerLiveness(handle, podName, allocs)
		f := Finding{Handle: handle, Count: len(allocs), Node: first.node, Address: addrList(allocs), Block: first.block.String()}
		switch {
		case podName:
			f.Kind, f.Why = PodNameHandle, fmt.Sprintf("keyed by pod name: any DEL of a container of pod %s can free these addresses", owner)
			f.Releasable = known && !ownerLive
		case recorded:
			continue
		case !known:
			f.Kind, f.Why = Unverified, "no record and no liveness source for this node: cannot tell a leak from a pod not behind safe-ipam"
		case !a.containerKeyed(handle, first.secondary):
			f.Kind, f.Why = Unverified, "no record, and the handle names no container, so liveness cannot speak for it"
		case ownerLive:
			continue
		default:
			f.Kind, f.Why, f.Releasable = Leak, fmt.Sprintf("no record, and %s does not list owner %s", a.opts.Liveness.Source, owner), true
		}
		a.add(f)
	}
}

// ownerLiveness names a handle's owner and says whether a liveness source
// that covers its node lists it (or any of its addresses).
func (a *analysis) ownerLiveness(handle string, podName bool, allocs []*allocation) (owner string, live, known bool) {
	l := a.opts.Liveness
	owner = a.containerOf(handle)
	if podName {
		owner = handle
	}
	for _, al := range allocs {
		if !l.Covers(al.node) {
			return owner, false, false
		}
		if l.addrs[al.addr] {
			return owner, true, true
		}
	}
	if podName {
		return owner, l.pods[handle], true
	}
	return owner, l.containers[owner], true
}

func (a *analysis) containerOf(handle string) string {
	if net, cid, ok := strings.Cut(handle, "."); ok && a.networks[net] {
		return cid
	}
	return handle
}

// calicoOwned: addresses Calico allocates for itself (tunnel addresses,
// null handles) belong to no container and are never judged.
func calicoOwned(handle string, secondary map[string]string) bool {
	return handle == "" || secondary["type"] != "" || strings.Contains(handle, "-tunnel-addr-")
}

// containerKeyed: the handle is "<network>.<containerID>", a bare
// container ID, or an allocation Calico tagged with a pod.
func (a *analysis) containerKeyed(handle string, secondary map[string]string) bool {
	if net, _, ok := strings.Cut(handle, "."); ok {
		return a.networks[net] || secondary["pod"] != ""
	}
	return containerID.MatchString(handle)
}

var (
	containerID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)
	dnsLabel    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	longHex     = regexp.MustCompile(`^[0-9a-f]{32,}$`)
	podNameLike = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
)

// isPodNameHandle tells Calico 2.x's "namespace.podname" from 3.x's
// "<network>.<containerID>" and from a bare container ID.
func (a *analysis) isPodNameHandle(handle string, secondary map[string]string) bool {
	ns, pod := secondary["namespace"], secondary["pod"]
	if ns != "" && pod != "" {
		return handle == ns+"."+pod
	}
	first, rest, ok := strings.Cut(handle, ".")
	if !ok || a.networks[first] || longHex.MatchString(rest) {
		return false
	}
	return dnsLabel.MatchString(first) && podNameLike.MatchString(rest)
}

func addrList(allocs []*allocation) string {
	addrs := make([]string, len(allocs))
	for i, al := range allocs {
		addrs[i] = al.addr.String()
	}
	sort.Strings(addrs)
	return strings.Join(addrs, ",")
}

// checkHandleDocs compares handle documents with the blocks' counts.
func (a *analysis) checkHandleDocs() {
	counts := map[string]map[string]int{}
	for handle, allocs := range a.byHandle {
		c := map[string]int{}
		for _, al := range allocs {
			c[al.block.String()]++
		}
		counts[handle] = c
	}
	for handle, c := range counts {
		doc := a.snap.Handles[handle]
		if doc == nil {
			if handle != "" {
				a.add(Finding{Kind: Inconsistent, Handle: handle, Count: total(c), Why: "blocks allocate addresses to a handle with no handle document"})
			}
			continue
		}
		if !sameCounts(doc.Handle.Block, c) {
			a.add(Finding{Kind: Inconsistent, Handle: handle, Count: total(c),
				Why: fmt.Sprintf("handle document counts %v, blocks hold %v", doc.Handle.Block, c)})
		}
	}
	for handle, doc := range a.snap.Handles {
		if _, ok := counts[handle]; !ok {
			a.add(Finding{Kind: Inconsistent, Handle: handle, Why: fmt.Sprintf("handle document counts %v, blocks hold nothing for it", doc.Handle.Block)})
		}
	}
}

func total(c map[string]int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func sameCounts(a, b map[string]int) bool {
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

var kindOrder = map[Kind]int{Duplicate: 0, EarlyRelease: 1, PodNameHandle: 2, Leak: 3, OrphanRecord: 4, Inconsistent: 5, Unverified: 6}

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
