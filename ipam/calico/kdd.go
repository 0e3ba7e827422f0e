package calico

import (
	"crypto/sha256"
	"crypto/sha3"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Calico's Kubernetes datastore (KDD) keeps IPAM in cluster-scoped custom
// resources of this group. calico-ipam finds it by API discovery and uses
// it as long as the v3 group is not the only one served.
const (
	KDDGroup      = "crd.projectcalico.org"
	KDDVersion    = "v1"
	KDDAPIVersion = KDDGroup + "/" + KDDVersion
)

// Kinds of the KDD resources IPAM reads and writes. IPPool keeps the kind
// of the etcd resource (KindIPPool) in this group too.
const (
	KindIPAMBlock     = "IPAMBlock"
	KindIPAMHandle    = "IPAMHandle"
	KindBlockAffinity = "BlockAffinity"
)

// Resource plurals, the path segments of the KDD resources.
const (
	PluralIPAMBlocks      = "ipamblocks"
	PluralIPAMHandles     = "ipamhandles"
	PluralBlockAffinities = "blockaffinities"
	PluralIPPools         = "ippools"
)

// Labels every BlockAffinity carries; calico-ipam lists a host's
// affinities by them instead of by name.
const (
	LabelHostnameHash = "projectcalico.org/hostname-hash"
	LabelAffinityType = "projectcalico.org/affinity-type"
	LabelIPVersion    = "projectcalico.org/ip-version"
	// AnnotationMetadata is on every IPAM object: "{}", or the labels
	// again on affinities.
	AnnotationMetadata = "projectcalico.org/metadata"
	// AffinityTypeHost is the affinity type of a node's claim.
	AffinityTypeHost = "host"
)

// maxNameLen is the longest object name the apiserver accepts.
const maxNameLen = 253

// affinityHashLen is the number of hex digits of the hash that keeps a
// shortened affinity name unique.
const affinityHashLen = 11

// BlockName is the IPAMBlock name of a block: its CIDR with '.', ':' and
// '/' each replaced by '-', e.g. 10-244-166-128-26 or fd00---122.
func BlockName(cidr netip.Prefix) string {
	return strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(cidr.Masked().String())
}

// AffinityName is the BlockAffinity name of node's claim on cidr:
// "<node>-<block name>". A name that would reach the apiserver's limit has
// the node cut short and a hash of the full pair appended, so that it
// stays unique; the result is then 252 characters long.
func AffinityName(node string, cidr netip.Prefix) string {
	block := BlockName(cidr)
	name := node + "-" + block
	if len(name) < maxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(node + "+" + block))
	// Two separators and the hash must fit beside the block name.
	keep := maxNameLen - 1 - len(block) - 2 - affinityHashLen
	return node[:keep] + "-" + block + "-" + hex.EncodeToString(sum[:])[:affinityHashLen]
}

// HandleName is the IPAMHandle name of a handle ID: the ID lowercased and
// nothing else, so IDs that differ only in case share one object. The
// original case stays in spec.handleID.
func HandleName(handleID string) string { return strings.ToLower(handleID) }

var subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// ValidateObjectName reports why the apiserver would reject name: it must
// be a lowercase RFC 1123 subdomain. Calico does not shorten or escape
// handle names, so a handle ID such as "k8s_pod_network.x" can never be
// stored; callers use this to say so instead of retrying.
func ValidateObjectName(name string) error {
	if len(name) > maxNameLen {
		return fmt.Errorf("object name %q is %d characters long, more than %d", name, len(name), maxNameLen)
	}
	if !subdomain.MatchString(name) {
		return fmt.Errorf("object name %q is not a lowercase RFC 1123 subdomain: only [a-z0-9.-], alphanumeric at both ends", name)
	}
	return nil
}

// HostnameHash is the hostname-hash label of node: the SHA3-256 of the
// name in base32 without padding. Labels cannot hold every node name, a
// hash always fits.
func HostnameHash(node string) string {
	sum := sha3.Sum256([]byte(node))
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])
}

// AffinityLabels are the labels of node's BlockAffinity for cidr.
func AffinityLabels(node string, cidr netip.Prefix) map[string]string {
	return map[string]string{
		LabelAffinityType: AffinityTypeHost,
		LabelHostnameHash: HostnameHash(node),
		LabelIPVersion:    strconv.Itoa(int(FamilyOf(cidr.Addr()))),
	}
}

// MetadataAnnotation is the value of AnnotationMetadata for an object with
// the given labels: "{}" without labels, else {"labels":{...}} with the
// keys sorted.
func MetadataAnnotation(labels map[string]string) string {
	if len(labels) == 0 {
		return "{}"
	}
	b, err := json.Marshal(struct {
		Labels map[string]string `json:"labels"`
	}{labels})
	if err != nil {
		panic(err) // a map of strings always encodes
	}
	return string(b)
}
