package calico

import (
	"encoding/json"
	"maps"
	"strings"
)

// KubeVirt VMs (Calico 3.32 and later): a virt-launcher pod's addresses
// live under a handle named for its VM, not its container, so they
// outlive each of the VM's pods and are shared with a live-migration
// target pod. The allocation's secondary attributes name the active
// owner pod, alternateOwnerAttrs the migration target.

// Owner attribute keys Calico writes for a VM's allocation, beside
// namespace, pod, node and timestamp.
const (
	AttrNamespace = "namespace"
	AttrPod       = "pod"
	AttrVMIName   = "vmi-name"
	AttrVMIUID    = "vmi-uid"
	AttrVMUID     = "vm-uid"
	AttrVMIMUID   = "vmim-uid"
)

// IsVMHandle says whether handle is a VM's. No container ID holds
// ".vmi."; a pod-name handle whose pod name does is taken for one, which
// only ever leaves it unjudged.
func IsVMHandle(handle string) bool { return strings.Contains(handle, ".vmi.") }

const alternateKey = "alternateOwnerAttrs"

// Alternate is the allocation's alternate owner (a migration target pod),
// nil when none.
func (a Attribute) Alternate() map[string]string {
	var m map[string]string
	if raw, ok := a.extra[alternateKey]; ok {
		_ = json.Unmarshal(raw, &m)
	}
	return m
}

// SetAlternate sets the alternate owner; an empty one is removed.
func (a *Attribute) SetAlternate(m map[string]string) {
	a.extra = maps.Clone(a.extra)
	if len(m) == 0 {
		delete(a.extra, alternateKey)
		return
	}
	if a.extra == nil {
		a.extra = map[string]json.RawMessage{}
	}
	raw, _ := json.Marshal(m) // a map of strings always encodes
	a.extra[alternateKey] = raw
}

// OwnedBy says whether owner attributes name the pod namespace/name.
func OwnedBy(attrs map[string]string, namespace, name string) bool {
	return len(attrs) > 0 && attrs[AttrNamespace] == namespace && attrs[AttrPod] == name
}

// UpdateAttribute changes the attribute of allocated ordinal ord with fn,
// and only of that ordinal: an attribute other ordinals share is copied.
func (b *Block) UpdateAttribute(ord int, fn func(*Attribute)) bool {
	a, ok := b.Attribute(ord)
	if !ok {
		return false
	}
	a.Secondary, a.extra = maps.Clone(a.Secondary), maps.Clone(a.extra)
	fn(&a)
	i := b.attributeIndex(a)
	b.Allocations[ord] = &i
	b.dropUnusedAttributes()
	return true
}
