package calicosim

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// The KubeVirt objects calico-ipam reads, for tests: minimal CRDs of our
// own (KubeVirt's operator is not needed to hold a VM and a VMI), and the
// objects KubeVirt would create.

// InstallKubeVirtCRDs installs VirtualMachine and VirtualMachineInstance
// (kubevirt.io/v1), schema-less, and waits until they serve.
func InstallKubeVirtCRDs(ctx context.Context, cfg *rest.Config) error {
	dyn, err := newDynamic(cfg)
	if err != nil {
		return err
	}
	for _, gvr := range []schema.GroupVersionResource{gvrVMs, gvrVMIs} {
		if err := installCRD(ctx, dyn, kubeVirtCRD(gvr)); err != nil {
			return err
		}
	}
	return nil
}

func kubeVirtCRD(gvr schema.GroupVersionResource) *unstructured.Unstructured {
	kind := map[string]string{gvrVMs.Resource: "VirtualMachine", gvrVMIs.Resource: "VirtualMachineInstance"}[gvr.Resource]
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": gvr.Resource + "." + gvr.Group},
		"spec": map[string]any{
			"group": gvr.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": gvr.Resource, "kind": kind},
			"versions": []any{map[string]any{"name": gvr.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}

// VM is a KubeVirt VirtualMachine and its VirtualMachineInstance, as
// created (Standalone: a VMI with no VM).
type VM struct {
	Namespace, Name string
	VMUID, VMIUID   string
	Standalone      bool
}

// SeedVM creates a VM named name and its VMI (the VMI alone when
// standalone), with KubeVirt's owner references.
func SeedVM(ctx context.Context, dyn dynamic.Interface, namespace, name string, standalone bool) (*VM, error) {
	out := &VM{Namespace: namespace, Name: name, Standalone: standalone}
	vmi := kubeVirtObject("VirtualMachineInstance", namespace, name)
	if !standalone {
		vm, err := dyn.Resource(gvrVMs).Namespace(namespace).Create(ctx, kubeVirtObject("VirtualMachine", namespace, name), metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating VM %s/%s: %w", namespace, name, err)
		}
		out.VMUID = string(vm.GetUID())
		vmi.SetOwnerReferences([]metav1.OwnerReference{owner("VirtualMachine", vm)})
	}
	created, err := dyn.Resource(gvrVMIs).Namespace(namespace).Create(ctx, vmi, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating VMI %s/%s: %w", namespace, name, err)
	}
	out.VMIUID = string(created.GetUID())
	return out, nil
}

// SeedVirtLauncher creates the virt-launcher pod pod of vm, labelled as a
// live-migration target when migrationUID is set, and returns its UID.
func SeedVirtLauncher(ctx context.Context, dyn dynamic.Interface, vm *VM, pod, migrationUID string) (string, error) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": pod, "namespace": vm.Namespace},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "compute", "image": "virt-launcher"}}},
	}}
	vmi := kubeVirtObject("VirtualMachineInstance", vm.Namespace, vm.Name)
	vmi.SetUID(ktypes.UID(vm.VMIUID))
	obj.SetOwnerReferences([]metav1.OwnerReference{owner("VirtualMachineInstance", vmi)})
	if migrationUID != "" {
		obj.SetLabels(map[string]string{migrationJobLabel: migrationUID})
	}
	created, err := dyn.Resource(gvrPods).Namespace(vm.Namespace).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating pod %s/%s: %w", vm.Namespace, pod, err)
	}
	return string(created.GetUID()), nil
}

// RecreateVMI replaces vm's VMI with a new one of the same name (a VM
// restart: KubeVirt deletes the VMI and creates the next), owned by the
// VM as before.
func RecreateVMI(ctx context.Context, dyn dynamic.Interface, vm *VM) error {
	r := dyn.Resource(gvrVMIs).Namespace(vm.Namespace)
	old, err := r.Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading VMI %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	if err := r.Delete(ctx, vm.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting VMI %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	vmi := kubeVirtObject("VirtualMachineInstance", vm.Namespace, vm.Name)
	vmi.SetOwnerReferences(old.GetOwnerReferences())
	created, err := r.Create(ctx, vmi, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating VMI %s/%s again: %w", vm.Namespace, vm.Name, err)
	}
	vm.VMIUID = string(created.GetUID())
	return nil
}

// DeleteVM starts deleting the VM (the VMI when standalone) as KubeVirt
// does while its pods stop: a finalizer keeps it, with its
// deletionTimestamp, while the test's DELs come.
func DeleteVM(ctx context.Context, dyn dynamic.Interface, vm *VM) error {
	r := dyn.Resource(gvrVMs).Namespace(vm.Namespace)
	if vm.Standalone {
		r = dyn.Resource(gvrVMIs).Namespace(vm.Namespace)
	}
	obj, err := r.Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	obj.SetFinalizers([]string{"kubevirt.io/test"})
	if _, err := r.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return r.Delete(ctx, vm.Name, metav1.DeleteOptions{})
}

func kubeVirtObject(kind, namespace, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{},
	}}
}

func owner(kind string, obj *unstructured.Unstructured) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "kubevirt.io/v1", Kind: kind, Name: obj.GetName(), UID: obj.GetUID(), Controller: &yes}
}

// DeletePod deletes a pod object, as the API server does once the kubelet
// has stopped it (its CNI DEL may still come later).
func DeletePod(ctx context.Context, dyn dynamic.Interface, namespace, pod string) error {
	if err := dyn.Resource(gvrPods).Namespace(namespace).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", namespace, pod, err)
	}
	return nil
}

// NewDynamic is a dynamic client for cfg, as the seeding functions take.
func NewDynamic(cfg *rest.Config) (dynamic.Interface, error) { return newDynamic(cfg) }
