// Package record defines safe-ipam's ownership record: which attachment
// holds which addresses, under which delegate handle.
package record

import (
	"fmt"
	"net/netip"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/utils"
)

// Attachment is the CNI identity of one interface of one container on one
// network. It is the key of a record.
type Attachment struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

func (a Attachment) String() string {
	return fmt.Sprintf("%s/%s/%s", a.Network, a.ContainerID, a.IfName)
}

// State says whether the delegate's allocation is known to be complete.
type State string

const (
	// Pending is written before the delegate ADD: the delegate may hold
	// addresses for the attachment that the record does not list yet.
	Pending State = "pending"
	// Committed records list every address the delegate gave.
	Committed State = "committed"
	// Releasing is written before the delegate DEL: the addresses may be
	// free in the delegate already, so the record must never be replayed.
	Releasing State = "releasing"
)

// Record is one attachment's ownership claim.
type Record struct {
	Attachment
	PodNamespace string    `json:"podNamespace,omitempty"`
	PodName      string    `json:"podName,omitempty"`
	PodUID       string    `json:"podUID,omitempty"`
	Node         string    `json:"node,omitempty"`
	Handle       string    `json:"handle"`
	State        State     `json:"state"`
	IPs          []string  `json:"ips,omitempty"`
	Result       []byte    `json:"result,omitempty"`
	Created      time.Time `json:"created"`
	Updated      time.Time `json:"updated"`
	// Host is the host name of the machine that wrote the record. Records
	// are kept per Calico node name, and two machines may share one (a
	// stale Calico nodename, as on a re-imaged node): GC judges only its
	// own host's records against its runtime. Older records carry none.
	Host string `json:"host,omitempty"`
	// Owner is the process working on a pending or releasing record.
	Owner *Owner `json:"owner,omitempty"`
	// Quarantined are allocations the delegate made for other attachments
	// from this record's addresses (they were freed behind its back). They
	// stay allocated while this record lives and are released with it.
	// Stores fill this in; the etcd store keeps them under keys of their
	// own, so a DEL's blind mark cannot lose them.
	Quarantined []Quarantine `json:"quarantined,omitempty"`
	// SharedWith is the record whose address index entries this one took
	// over when committed: both hold one shared handle's addresses (a
	// KubeVirt VM's, see SharedHandle). Released first, it hands them
	// back.
	SharedWith *Peer `json:"sharedWith,omitempty"`

	// Revision identifies this version of the record in its store, for
	// compare-and-swap. Stores set it; it is not part of the record's JSON.
	Revision int64 `json:"-"`
}

// Quarantine is the allocation of an ADD that the delegate gave an
// address a live record holds. It stays under that attachment's own
// delegate handle, which no DEL of that attachment releases, until the
// holder is released.
type Quarantine struct {
	Attachment
	Node string   `json:"node,omitempty"`
	IPs  []string `json:"ips"`
	// Handle, PodNamespace, PodName and PodUID are set for a KubeVirt
	// VM's pod, whose allocation Calico keeps under its VM's handle
	// (Handle) rather than the container's: only a DEL with the pod's
	// identity reaches it, so the release passes them.
	Handle       string `json:"handle,omitempty"`
	PodNamespace string `json:"podNamespace,omitempty"`
	PodName      string `json:"podName,omitempty"`
	PodUID       string `json:"podUID,omitempty"`
}

// Validate applies CNI's rules for names. Stores build keys and file names
// from these fields, so nothing else may reach them.
func (a Attachment) Validate() error {
	if err := ValidateNetwork(a.Network); err != nil {
		return err
	}
	if !cniName(a.ContainerID) {
		if err := utils.ValidateContainerID(a.ContainerID); err != nil {
			return fmt.Errorf("container ID %q: %s", a.ContainerID, err.Msg)
		}
	}
	if err := utils.ValidateInterfaceName(a.IfName); err != nil {
		return fmt.Errorf("interface name %q: %s", a.IfName, err.Msg)
	}
	// Records are JSON, which cannot carry other bytes unchanged; a name
	// that came back different could never be found again.
	if !utf8.ValidString(a.IfName) {
		return fmt.Errorf("interface name %q is not valid UTF-8", a.IfName)
	}
	return nil
}

// ValidateNetwork applies CNI's rule for network names.
func ValidateNetwork(network string) error {
	if cniName(network) {
		return nil
	}
	if err := utils.ValidateNetworkName(network); err != nil {
		return fmt.Errorf("network name %q: %s", network, err.Msg)
	}
	return nil
}

// ValidateNode applies CNI's name rule to a node name, which stores use
// in keys.
func ValidateNode(node string) error {
	if !cniName(node) {
		return fmt.Errorf("node name %q: must match %s", node, nodeName)
	}
	return nil
}

var nodeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// cniName says whether s matches CNI's rule for container IDs and network
// names, which node names share (nodeName): a letter or digit, then
// letters, digits, '_', '.' and '-'. The regexp costs a few seconds
// when an audit reads a million records; the library still says why a
// name fails.
func cniName(s string) bool {
	if s == "" || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// ParseAddr reads an address given as a prefix ("10.0.0.1/26", as results
// and records carry it) or bare ("10.0.0.1", as CRI and the pods API give
// it).
func ParseAddr(s string) (netip.Addr, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), true
	}
	addr, err := netip.ParseAddr(s)
	return addr, err == nil
}

// CheckStored validates a record read back from a store, whose location
// there names att (and node, when the store keys records by node): a
// store is input like the runtime's, since whoever can write it can make
// DEL and GC release any handle. Every field that is acted on must be one
// a safe-ipam ADD could have written for att.
func (r *Record) CheckStored(att Attachment, node string) error {
	if err := att.Validate(); err != nil {
		return fmt.Errorf("stored under %s: %w", att, err)
	}
	if r.Attachment != att {
		return fmt.Errorf("stored under %s but names %s", att, r.Attachment)
	}
	if r.Node != "" && (ValidateNode(r.Node) != nil || node != "" && r.Node != node) {
		return fmt.Errorf("%s: node %q is not the node it is stored under", att, r.Node)
	}
	for _, f := range [...]struct{ name, v string }{{"podNamespace", r.PodNamespace}, {"podName", r.PodName}, {"podUID", r.PodUID}, {"handle", r.Handle}, {"host", r.Host}} {
		if err := ValidateArgValue(f.v); err != nil {
			return fmt.Errorf("%s: %s: %w", att, f.name, err)
		}
	}
	for _, ip := range r.IPs {
		if _, ok := ParseAddr(ip); !ok {
			return fmt.Errorf("%s: address %q does not parse", att, ip)
		}
	}
	if r.SharedWith != nil {
		if err := r.SharedWith.check(att.Network); err != nil {
			return fmt.Errorf("%s: %w", att, err)
		}
		if !SharedHandle(att.Network, r.Handle) {
			return fmt.Errorf("%s: sharedWith set, but handle %q is not a shared one", att, r.Handle)
		}
	}
	return nil
}

// Check validates a quarantine read back from a store, tied to a holder
// on network: its release is a delegate DEL of its attachment, so it must
// be one safe-ipam could have quarantined there.
func (q Quarantine) Check(network string) error {
	if err := q.Attachment.Validate(); err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	if q.Network != network {
		return fmt.Errorf("quarantine %s is not on the holder's network %s", q.Attachment, network)
	}
	if q.Node != "" {
		if err := ValidateNode(q.Node); err != nil {
			return fmt.Errorf("quarantine %s: %w", q.Attachment, err)
		}
	}
	for _, ip := range q.IPs {
		if _, ok := ParseAddr(ip); !ok {
			return fmt.Errorf("quarantine %s: address %q does not parse", q.Attachment, ip)
		}
	}
	return q.checkVM(network)
}

// checkVM: a quarantine names a handle only as a VM pod's, with that
// pod, since its release passes them to the delegate.
func (q Quarantine) checkVM(network string) error {
	for field, v := range map[string]string{"podNamespace": q.PodNamespace, "podName": q.PodName, "podUID": q.PodUID, "handle": q.Handle} {
		if err := ValidateArgValue(v); err != nil {
			return fmt.Errorf("quarantine %s: %s: %w", q.Attachment, field, err)
		}
	}
	if q.Handle != "" && !VMPodHandle(network, q.PodNamespace, q.PodName, q.Handle) {
		return fmt.Errorf("quarantine %s: handle %q is not a VM handle of pod %s/%s", q.Attachment, q.Handle, q.PodNamespace, q.PodName)
	}
	return nil
}

// ValidateArgValue accepts a value that may go into CNI_ARGS as one
// KEY=VALUE pair: pod names and UIDs as the runtime sends them. A ';'
// would start another pair, and control characters have no place in a
// name.
func ValidateArgValue(v string) error {
	if len(v) > maxArgValue {
		return fmt.Errorf("%d bytes, longer than %d", len(v), maxArgValue)
	}
	for _, c := range v {
		if c == ';' || c < 0x20 || c == 0x7f || c == utf8.RuneError {
			return fmt.Errorf("%q holds %q, which CNI_ARGS cannot carry", v, c)
		}
	}
	return nil
}

// maxArgValue is well above Kubernetes' longest name (253 bytes) and a
// Calico handle (<network>.<64-byte container ID>).
const maxArgValue = 512

// Holds says whether r lists addr among its addresses.
func (r *Record) Holds(addr netip.Addr) bool {
	for _, ip := range r.IPs {
		if a, ok := ParseAddr(ip); ok && a == addr {
			return true
		}
	}
	return false
}

// RemoteQuarantine is a quarantine whose holder is a record this store
// cannot read (another node's, or another machine's under the same node
// name), known by its cluster-wide claim: the claim's name and the holder
// it names. GoneSince is when a gc round first found that claim gone (by
// this machine's clock; nil while it stands): the allocation is released
// only once it stays gone for a grace (rulebook.RemoteQuarantine).
type RemoteQuarantine struct {
	Quarantine Quarantine `json:"quarantine"`
	Claim      string     `json:"claim"`
	Holder     Peer       `json:"holder"`
	HolderHost string     `json:"holderHost,omitempty"`
	GoneSince  *time.Time `json:"goneSince,omitempty"`
}

// Check validates m as the mark of att's quarantine in network.
func (m *RemoteQuarantine) Check(att Attachment) error {
	if m.Quarantine.Attachment != att {
		return fmt.Errorf("the mark of %s names the quarantine of %s", att, m.Quarantine.Attachment)
	}
	if err := m.Quarantine.Check(att.Network); err != nil {
		return err
	}
	if m.Claim == "" {
		return fmt.Errorf("the mark of %s names no claim", att)
	}
	return m.Holder.check(att.Network)
}
