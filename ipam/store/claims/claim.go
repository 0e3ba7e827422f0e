// Package claims keeps the cluster-wide index of the addresses safe-ipam's
// records hold where no store spans the cluster: on Calico's Kubernetes
// datastore each node keeps its records in its own file store, and an
// AddressClaim per address, in the API server Calico's data is in, tells
// every other node that the address is held. A claim is created with its
// record's commit and deleted with its release; an ADD that Calico hands
// an address another live attachment's claim holds is fenced, as with the
// etcd store's index (docs/design.md, "Cluster-wide claims").
package claims

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// The AddressClaim resource (deploy/safe-ipam-claims.yaml).
const (
	Group      = "safe-ipam.github.io"
	Version    = "v1"
	Resource   = "addressclaims"
	Kind       = "AddressClaim"
	collection = "/apis/" + Group + "/" + Version + "/" + Resource
	// NodeLabel names the node whose record a claim is (nodeLabelValue),
	// so that a node lists its own claims alone.
	NodeLabel = Group + "/node"
	// Collection is the API path of every AddressClaim.
	Collection = collection
)

// Verbs are what safe-ipam does with AddressClaims, and all that
// deploy/safe-ipam-claims.yaml grants: create one with each commit, read
// one that holds an address, list a node's own (gc), delete one at each
// release.
var Verbs = []string{"create", "delete", "get", "list"}

// Claim is one AddressClaim: the record of Holder, on Node, holds Addr.
type Claim struct {
	Addr netip.Addr
	Node string
	// Host is the machine whose store holds the record: two machines may
	// share a Calico node name (a stale nodename), and each judges only
	// the claims of its own records.
	Host   string
	Holder record.Attachment
	// The holder's pod and delegate handle, for people and the audit.
	PodNamespace, PodName, PodUID, Handle string
	// UID and ResourceVersion are the object's, which a release names
	// as preconditions.
	UID, ResourceVersion string
	Created              time.Time
}

// Of is the claim rec makes on addr.
func Of(rec *record.Record, addr netip.Addr) *Claim {
	return &Claim{Addr: addr, Node: rec.Node, Host: rec.Host, Holder: rec.Attachment, PodNamespace: rec.PodNamespace,
		PodName: rec.PodName, PodUID: rec.PodUID, Handle: rec.Handle}
}

// Names says whether c is rec's: its attachment on its node and host.
func (c *Claim) Names(rec *record.Record) bool {
	return c.Holder == rec.Attachment && c.Node == rec.Node && c.Host == rec.Host
}

// MadeFor says whether rec's record made the claim, under the node and
// host names rec has or had: a DEL after a node rename (or a host
// rename) marks the record under the new name, while its claims name the
// old one. A rename changes one name at a time, and a container's ID is
// its machine's alone, so a claim of rec's attachment under rec's node or
// rec's host is its own.
func (c *Claim) MadeFor(rec *record.Record) bool {
	return c.Holder == rec.Attachment && (c.Node == rec.Node || c.Host == rec.Host)
}

// Record is the holder as a committed record that holds Addr, as far as
// the claim tells: the fence's holder when the record is another node's.
func (c *Claim) Record() *record.Record {
	return &record.Record{Attachment: c.Holder, Node: c.Node, Host: c.Host, PodNamespace: c.PodNamespace, PodName: c.PodName,
		PodUID: c.PodUID, Handle: c.Handle, State: record.Committed, IPs: []string{c.Addr.String()}, Created: c.Created, Updated: c.Created}
}

// Name is the object name of the claim on addr in network: the network
// (hashed when it is not a DNS label), then the address, dotted for IPv4
// and as eight dashed groups for IPv6.
func Name(network string, addr netip.Addr) string {
	addr = addr.Unmap()
	a := addr.String()
	if addr.Is6() {
		a = strings.ReplaceAll(addr.StringExpanded(), ":", "-")
	}
	return label(network) + "." + a
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// label is s if it is a DNS label, else "x-" and a hash of it: the API
// server accepts only DNS subdomains for names and 63 characters for label
// values.
func label(s string) string {
	if dnsLabel.MatchString(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "x-" + hex.EncodeToString(sum[:16])
}

// object is an AddressClaim as the API server stores it.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name              string            `json:"name"`
		UID               string            `json:"uid,omitempty"`
		ResourceVersion   string            `json:"resourceVersion,omitempty"`
		CreationTimestamp *time.Time        `json:"creationTimestamp,omitempty"`
		Labels            map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec spec `json:"spec"`
}

type spec struct {
	Network      string `json:"network"`
	Address      string `json:"address"`
	Node         string `json:"node"`
	Host         string `json:"host,omitempty"`
	ContainerID  string `json:"containerID"`
	IfName       string `json:"ifName"`
	PodNamespace string `json:"podNamespace,omitempty"`
	PodName      string `json:"podName,omitempty"`
	PodUID       string `json:"podUID,omitempty"`
	Handle       string `json:"handle,omitempty"`
}

func (c *Claim) object() object {
	o := object{APIVersion: Group + "/" + Version, Kind: Kind, Spec: spec{
		Network: c.Holder.Network, Address: c.Addr.String(), Node: c.Node, Host: c.Host, ContainerID: c.Holder.ContainerID,
		IfName: c.Holder.IfName, PodNamespace: c.PodNamespace, PodName: c.PodName, PodUID: c.PodUID, Handle: c.Handle}}
	o.Metadata.Name = Name(c.Holder.Network, c.Addr)
	o.Metadata.Labels = map[string]string{NodeLabel: label(c.Node)}
	return o
}

// errDamaged: an object that does not say what its name claims.
var errDamaged = errors.New("a damaged AddressClaim")

// claim decodes o. The object is input: one whose spec does not match its
// name, or names no valid attachment or node, is an error (a caller
// that meets one where an address is claimed takes it as held).
func (o *object) claim() (*Claim, error) {
	addr, err := netip.ParseAddr(o.Spec.Address)
	if err != nil {
		return nil, fmt.Errorf("%w %s: address %q", errDamaged, o.Metadata.Name, o.Spec.Address)
	}
	c := &Claim{Addr: addr, Node: o.Spec.Node, Host: o.Spec.Host,
		Holder:       record.Attachment{Network: o.Spec.Network, ContainerID: o.Spec.ContainerID, IfName: o.Spec.IfName},
		PodNamespace: o.Spec.PodNamespace, PodName: o.Spec.PodName, PodUID: o.Spec.PodUID, Handle: o.Spec.Handle,
		UID: o.Metadata.UID, ResourceVersion: o.Metadata.ResourceVersion}
	if o.Metadata.CreationTimestamp != nil {
		c.Created = *o.Metadata.CreationTimestamp
	}
	if Name(c.Holder.Network, addr) != o.Metadata.Name {
		return nil, fmt.Errorf("%w %s: its spec claims %s in %s", errDamaged, o.Metadata.Name, addr, c.Holder.Network)
	}
	if err := c.Holder.Validate(); err != nil {
		return nil, fmt.Errorf("%w %s: %v", errDamaged, o.Metadata.Name, err)
	}
	if err := record.ValidateNode(c.Node); err != nil {
		return nil, fmt.Errorf("%w %s: %v", errDamaged, o.Metadata.Name, err)
	}
	return c, nil
}
