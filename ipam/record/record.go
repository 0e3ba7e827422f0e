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
	// Owner is the process working on a pending or releasing record.
	Owner *Owner `json:"owner,omitempty"`
	// Quarantined are allocations the delegate made for other attachments
	// from this record's addresses (they were freed behind its back). They
	// stay allocated while this record lives and are released with it.
	// Stores fill this in; the etcd store keeps them under keys of their
	// own, so a DEL's blind mark cannot lose them.
	Quarantined []Quarantine `json:"quarantined,omitempty"`

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
}

// Validate applies CNI's rules for names. Stores build keys and file names
// from these fields, so nothing else may reach them.
func (a Attachment) Validate() error {
	if err := ValidateNetwork(a.Network); err != nil {
		return err
	}
	if err := utils.ValidateContainerID(a.ContainerID); err != nil {
		return fmt.Errorf("container ID %q: %s", a.ContainerID, err.Msg)
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
	if err := utils.ValidateNetworkName(network); err != nil {
		return fmt.Errorf("network name %q: %s", network, err.Msg)
	}
	return nil
}

// ValidateNode applies CNI's name rule to a node name, which stores use
// in keys.
func ValidateNode(node string) error {
	if node == "" || !nodeName.MatchString(node) {
		return fmt.Errorf("node name %q: must match %s", node, nodeName)
	}
	return nil
}

var nodeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

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
