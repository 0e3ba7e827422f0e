package record

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
)

// Some handles are shared on purpose: Calico (3.32 and later) keys a
// KubeVirt VM's addresses by the VM, "<network>.vmi.<namespace>.<name>",
// so that every pod of the VM (after a restart, a live-migration target
// beside its source) is given the same address. Two records holding such
// an address under the same handle are one VM, not a duplicate.

// SharedHandle says whether handle is one Calico gives several pods on
// purpose (a VM's). No container ID holds ".vmi.".
func SharedHandle(network, handle string) bool {
	return strings.HasPrefix(handle, network+".vmi.")
}

// vmHandleMax is the longest handle Calico writes for a VM; past it the
// namespace and name are replaced by "_" and a hash.
const vmHandleMax = 128

// VMHandle is the handle of the addresses of VMI name in namespace on
// network: "<network>.vmi.<namespace>.<name>", or, past 128 bytes,
// "<network>.vmi._" and the start of the URL-safe base64 of the SHA-256
// of "<namespace>.<name>", filling 128 bytes. The hash has 43 characters:
// where the rest of 128 bytes is longer (a network name under 84
// bytes), Calico's plugin fails, and so does VMHandle.
func VMHandle(network, namespace, name string) (string, error) {
	prefix, suffix := network+".vmi.", namespace+"."+name
	if len(prefix)+len(suffix) < vmHandleMax || len(prefix)+len(suffix) == vmHandleMax && !strings.HasPrefix(suffix, "_") {
		return prefix + suffix, nil
	}
	sum := sha256.Sum256([]byte(suffix))
	hash := base64.RawURLEncoding.EncodeToString(sum[:])
	if n := vmHandleMax - 1 - len(prefix); n <= len(hash) {
		return prefix + "_" + hash[:n], nil
	}
	return "", fmt.Errorf("the VM handle of %s/%s on network %s would pass %d bytes, and Calico cannot shorten it", namespace, name, network, vmHandleMax)
}

// VirtLauncherPrefix starts the name of every pod KubeVirt runs a VM in;
// calico-ipam looks no other pod up.
const VirtLauncherPrefix = "virt-launcher-"

// VMPodHandle says whether handle, under which Calico keeps an address
// of pod namespace/name, is that pod's VM's: the pod is a virt-launcher
// pod, and the handle a VM handle of its namespace (or a hashed one,
// "<network>.vmi._<hash>", which names none).
func VMPodHandle(network, namespace, pod, handle string) bool {
	if namespace == "" || !strings.HasPrefix(pod, VirtLauncherPrefix) {
		return false
	}
	prefix := network + ".vmi."
	return strings.HasPrefix(handle, prefix+namespace+".") || strings.HasPrefix(handle, prefix+"_")
}

// Shares says whether r and o hold their addresses under one shared
// handle.
func (r *Record) Shares(o *Record) bool {
	return r.Network == o.Network && r.Handle == o.Handle && SharedHandle(r.Network, r.Handle)
}

// Peer names another node's or this node's record.
type Peer struct {
	Attachment
	Node string `json:"node,omitempty"`
}

// Is says whether p names rec.
func (p *Peer) Is(rec *Record) bool {
	return p != nil && p.Attachment == rec.Attachment && p.Node == rec.Node
}

// TakesOver says whether committing r may take the address index entries
// of holder, a committed record: r names holder as the record it shares
// its addresses with (SharedWith), under the same shared handle.
func (r *Record) TakesOver(holder *Record) bool {
	return r.SharedWith.Is(holder) && r.Shares(holder)
}

func (p *Peer) check(network string) error {
	if err := p.Attachment.Validate(); err != nil {
		return fmt.Errorf("sharedWith: %w", err)
	}
	if p.Network != network {
		return fmt.Errorf("sharedWith %s is not on network %s", p.Attachment, network)
	}
	if p.Node != "" {
		if err := ValidateNode(p.Node); err != nil {
			return fmt.Errorf("sharedWith %s: %w", p.Attachment, err)
		}
	}
	return nil
}
