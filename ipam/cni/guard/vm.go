package guard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// KubeVirt VMs (Calico 3.32 and later): calico-ipam keeps a virt-launcher
// pod's addresses under its VM's handle, which outlives the pod and is
// shared with the VM's next pod and its live-migration target. safe-ipam
// keeps out of Calico's way for those addresses: the record names the VM
// handle, a pod of the same VM may hold the address beside it, and the
// release passes the pod's identity, so that calico-ipam clears the pod's
// owner attributes and frees the address only once the VM is deleted.
// Anyone else given the address is fenced as usual.

// vmHandle is the VM handle Calico keeps ips under, after the delegate's
// ADD of a virt-launcher pod, or "" when they are the container's. Only
// such pods are looked up (one read of Calico's datastore), so an ordinary
// pod's ADD costs nothing more. The handle is trusted only as Calico's
// own data ties it to this pod (vmPodAllocation): the pod's name is the
// tenant's choice, and Calico may have handed it an address another VM
// holds. What cannot be read or proven leaves the container handle: the
// address is then fenced from the VM's other pods, never shared on a
// guess.
func (g *Guard) vmHandle(ctx context.Context, pending *record.Record, ips []string) string {
	ns, pod := pending.PodNamespace, pending.PodName
	if g.cfg.DelegateHandles == config.HandlesPod || ns == "" || !strings.HasPrefix(pod, record.VirtLauncherPrefix) || len(ips) == 0 {
		return ""
	}
	handle, err := g.allocationHandle(ctx, ips, func(a Allocation) error {
		return vmPodAllocation(g.cfg.Network, ns, pod, a)
	})
	if err != nil {
		g.log.Warn("ADD of a virt-launcher pod: cannot tell that Calico keeps its addresses under its VM's handle; recording the container's", "pod", ns+"/"+pod, "error", err)
		return ""
	}
	if !record.VMPodHandle(g.cfg.Network, ns, pod, handle) {
		return ""
	}
	return handle
}

// vmPodAllocation says why a, an allocation of pod namespace/name, is not
// proven to be its VM's (nil when it is): a VM handle is shared only when
// Calico's owner or alternate owner attributes name this pod, and the
// handle is the one Calico names for the VMI those attributes name (a
// hashed handle, "<network>.vmi._<hash>", names no VMI by itself). An
// allocation under a container's handle is not a VM's, which is no error.
func vmPodAllocation(network, namespace, pod string, a Allocation) error {
	if !record.SharedHandle(network, a.Handle) {
		return nil
	}
	owner := a.Owner
	if !ownedBy(owner, namespace, pod) {
		owner = a.Alternate
	}
	if !ownedBy(owner, namespace, pod) {
		return fmt.Errorf("Calico's allocation under %s names another owner (%s/%s, alternate %s/%s), not this pod", a.Handle,
			a.Owner[ownerNamespace], a.Owner[ownerPod], a.Alternate[ownerNamespace], a.Alternate[ownerPod])
	}
	want, err := record.VMHandle(network, namespace, owner[ownerVMI])
	if owner[ownerVMI] == "" || err != nil || want != a.Handle {
		return fmt.Errorf("handle %s is not the one Calico names for the VMI %q its allocation names", a.Handle, owner[ownerVMI])
	}
	return nil
}

// Owner attribute keys Calico writes (see package calico).
const (
	ownerNamespace = "namespace"
	ownerPod       = "pod"
	ownerNode      = "node"
	ownerVMI       = "vmi-name"
)

// ownedBy says whether owner attributes name the pod namespace/name.
func ownedBy(owner map[string]string, namespace, name string) bool {
	return len(owner) > 0 && owner[ownerNamespace] == namespace && owner[ownerPod] == name
}

// allocationHandle reads the one handle Calico keeps every one of ips
// under, each allocation checked by check; addresses under different
// handles are an error.
func (g *Guard) allocationHandle(ctx context.Context, ips []string, check func(Allocation) error) (string, error) {
	var handle string
	for i, ip := range ips {
		addr, ok := record.ParseAddr(ip)
		if !ok {
			return "", errors.New("address " + ip + " does not parse")
		}
		a, err := g.calico.Allocation(ctx, addr)
		if err != nil {
			return "", err
		}
		if err := check(a); err != nil {
			return "", err
		}
		if i > 0 && a.Handle != handle {
			return "", errors.New("the pod's addresses are under handles " + handle + " and " + a.Handle)
		}
		handle = a.Handle
	}
	return handle, nil
}

// share commits committed beside holder, a record of the same VM, taking
// its address index entries over (record.TakesOver).
func (g *Guard) share(ctx context.Context, pending, committed *record.Record, holder *record.Record) error {
	committed.SharedWith = &record.Peer{Attachment: holder.Attachment, Node: holder.Node}
	_, err := g.store.Commit(ctx, pending, committed)
	if err == nil {
		g.log.Info("ADD shares its VM's address with the VM's other pod", "attachment", committed.Attachment.String(), "handle", committed.Handle, "with", holder.Attachment.String())
	}
	return err
}

// handBack gives the address index entries of rec, a released record
// that shared a VM's addresses, back to the record it took them from, if
// that one still holds them (a migration that failed: the target goes,
// the source stays). Without it, the source's address would go unfenced.
// It never fails the release.
func (g *Guard) handBack(ctx context.Context, rec *record.Record) {
	if rec == nil || rec.SharedWith == nil {
		return
	}
	st := g.store
	if peer := rec.SharedWith.Node; peer != "" && peer != g.node {
		cluster, ok := g.store.(store.Cluster)
		if !ok {
			return // a file store holds this node's records only
		}
		st = cluster.ForNode(peer)
	}
	other, err := st.Get(ctx, rec.SharedWith.Attachment)
	if err != nil || other == nil || other.State != record.Committed || !other.Shares(rec) {
		return
	}
	if _, err := st.Commit(ctx, other, other); err != nil {
		g.log.Warn("could not hand the VM's address back to its other pod", "released", rec.Attachment.String(), "to", other.Attachment.String(), "error", err)
	}
}
