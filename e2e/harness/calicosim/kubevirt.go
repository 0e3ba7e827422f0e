package calicosim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// calico-ipam's KubeVirt branch (Calico 3.32 and later), modelled from
// its behaviour: a pod whose name starts with "virt-launcher-" is looked
// up through the config's kubeconfig; when its controller is a
// kubevirt.io/v1 VirtualMachineInstance whose uid matches, its addresses
// live under the VM's handle (calico.VMHandle), which outlives the pod.
// KubeVirtVMAddressPersistence is taken as enabled, its default (Calico
// reads it from the IPAMConfiguration "default"; not modelled).

const (
	virtLauncherPrefix = "virt-launcher-"
	// migrationJobLabel marks a live-migration target pod.
	migrationJobLabel = "kubevirt.io/migrationJobUID"
)

var (
	gvrPods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	gvrVMIs = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}
	gvrVMs  = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachines"}
)

// errPodGone: the pod a VM lookup names does not exist.
var errPodGone = errors.New("pod not found")

// vmPod is a virt-launcher pod of a VM, as calico-ipam sees it.
type vmPod struct {
	namespace, pod string
	vmi, vmiUID    string
	vmUID          string // "" for a standalone VMI
	// migrationUID is set for a live-migration target pod.
	migrationUID string
	// deleting: the VM (or the standalone VMI) has a deletionTimestamp;
	// only then does a DEL release the VM's handle.
	deleting bool
}

// vmOf looks the pod up as calico-ipam does; nil when it is not a VM's.
func (c *call) vmOf(ctx context.Context) (*vmPod, error) {
	if !c.pod.HasPod() || !strings.HasPrefix(c.pod.Name, virtLauncherPrefix) {
		return nil, nil
	}
	kube := c.kube
	if kube == nil {
		var err error
		if kube, err = NewKubeClient(c.conf.Kubernetes.Kubeconfig); err != nil {
			return nil, fmt.Errorf("KubeVirt pod lookup: %w", err)
		}
	}
	pod, err := kube.Resource(gvrPods).Namespace(c.pod.Namespace).Get(ctx, c.pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errPodGone
	}
	if err != nil {
		return nil, fmt.Errorf("KubeVirt pod lookup: %w", err)
	}
	ref := controllerOf(pod, "VirtualMachineInstance")
	if ref == nil {
		return nil, nil
	}
	vmi, err := getOwned(ctx, kube, gvrVMIs, c.pod.Namespace, *ref)
	if err != nil {
		return nil, err
	}
	out := &vmPod{namespace: c.pod.Namespace, pod: c.pod.Name, vmi: vmi.GetName(), vmiUID: string(vmi.GetUID()),
		migrationUID: pod.GetLabels()[migrationJobLabel], deleting: vmi.GetDeletionTimestamp() != nil}
	if vmRef := ownerOf(vmi, "VirtualMachine"); vmRef != nil {
		vm, err := getOwned(ctx, kube, gvrVMs, c.pod.Namespace, *vmRef)
		if err != nil {
			return nil, err
		}
		out.vmUID, out.deleting = string(vm.GetUID()), vm.GetDeletionTimestamp() != nil
	}
	return out, nil
}

func controllerOf(obj *unstructured.Unstructured, kind string) *metav1.OwnerReference {
	for _, r := range obj.GetOwnerReferences() {
		if r.Kind == kind && r.APIVersion == "kubevirt.io/v1" && r.Controller != nil && *r.Controller {
			return &r
		}
	}
	return nil
}

func ownerOf(obj *unstructured.Unstructured, kind string) *metav1.OwnerReference {
	for _, r := range obj.GetOwnerReferences() {
		if r.Kind == kind && r.APIVersion == "kubevirt.io/v1" {
			return &r
		}
	}
	return nil
}

// getOwned reads the owner ref names and checks it is that very object.
func getOwned(ctx context.Context, kube dynamic.Interface, gvr schema.GroupVersionResource, ns string, ref metav1.OwnerReference) (*unstructured.Unstructured, error) {
	obj, err := kube.Resource(gvr).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("KubeVirt %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
	}
	if obj.GetUID() != ref.UID {
		return nil, fmt.Errorf("KubeVirt %s %s/%s has uid %s, the pod's owner reference %s", ref.Kind, ns, ref.Name, obj.GetUID(), ref.UID)
	}
	return obj, nil
}

// attributes are the owner attributes of a VM's allocation.
func (v *vmPod) attributes(base map[string]string) map[string]string {
	attrs := maps.Clone(base)
	attrs[calico.AttrVMIName], attrs[calico.AttrVMIUID] = v.vmi, v.vmiUID
	if v.vmUID != "" {
		attrs[calico.AttrVMUID] = v.vmUID
	}
	if v.migrationUID != "" {
		attrs[calico.AttrVMIMUID] = v.migrationUID
	}
	return attrs
}

// handleAddrs lists the addresses handle holds, with their blocks.
func (c *call) handleAddrs(handle string) ([]Assignment, error) {
	st := c.alloc.store()
	h, err := st.readHandle(c.ctx, handle)
	if err != nil || h.handle == nil {
		return nil, err
	}
	var out []Assignment
	for _, cidr := range slices.Sorted(maps.Keys(h.handle.Block)) {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("handle %s names block %q: %w", handle, cidr, err)
		}
		ref, err := st.readBlock(c.ctx, p)
		if err != nil || ref == nil {
			return nil, err
		}
		for _, ord := range ref.block.OrdinalsOf(handle) {
			ip, err := ref.block.IP(ord)
			if err != nil {
				return nil, err
			}
			out = append(out, Assignment{IP: ip, Block: p, Handle: handle})
		}
	}
	return out, nil
}

// setOwners applies change to the owner attributes of every address of
// handle, one write guarded by what was read (a lost race starts over).
func (c *call) setOwners(handle string, change func(*calico.Attribute)) error {
	st := c.alloc.store()
	_, err := retry(c.ctx, c.alloc.maxAttempts(), func() (struct{}, error) {
		h, err := st.readHandle(c.ctx, handle)
		if err != nil || h.handle == nil {
			return struct{}{}, err
		}
		var changed []*blockRef
		for _, cidr := range slices.Sorted(maps.Keys(h.handle.Block)) {
			p, err := netip.ParsePrefix(cidr)
			if err != nil {
				return struct{}{}, err
			}
			ref, err := st.readBlock(c.ctx, p)
			if err != nil || ref == nil {
				return struct{}{}, err
			}
			for _, ord := range ref.block.OrdinalsOf(handle) {
				ref.block.UpdateAttribute(ord, change)
			}
			changed = append(changed, ref)
		}
		return struct{}{}, st.commitRelease(c.ctx, h, changed, func(*calico.Handle) {})
	})
	return err
}

// ownersLeft says whether any address of handle still has an owner.
func (c *call) ownersLeft(handle string) (bool, error) {
	st := c.alloc.store()
	asgs, err := c.handleAddrs(handle)
	if err != nil {
		return false, err
	}
	for _, asg := range asgs {
		ref, err := st.readBlock(c.ctx, asg.Block)
		if err != nil || ref == nil {
			return false, err
		}
		ord, err := ref.block.Ordinal(asg.IP)
		if err != nil {
			return false, err
		}
		if a, ok := ref.block.Attribute(ord); ok && (len(a.Secondary) > 0 || len(a.Alternate()) > 0) {
			return true, nil
		}
	}
	return false, nil
}
