package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// RekeyKubeToPodHandle is RekeyToPodHandle on Calico's Kubernetes
// datastore. The API has no multi-object transaction, so it writes in
// calico-ipam's own order: the new handle first, then the block, then the
// old handle. Every write carries the resourceVersion it read; tests run
// one command at a time, so a conflict means something else writes.
func RekeyKubeToPodHandle(ctx context.Context, cfg *rest.Config, network, containerID string, pod Pod) error {
	if pod.Name == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	r := kubeRekey{dyn: dyn, from: network + "." + containerID, to: pod.Namespace + "." + pod.Name, pod: pod}
	if err := r.run(ctx); err != nil {
		return fmt.Errorf("moving %s to legacy handle %s: %w", r.from, r.to, err)
	}
	return nil
}

type kubeRekey struct {
	dyn      dynamic.Interface
	from, to string
	pod      Pod
}

func (r *kubeRekey) resource(plural string) dynamic.ResourceInterface {
	return r.dyn.Resource(schema.GroupVersionResource{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: plural})
}

func (r *kubeRekey) run(ctx context.Context) error {
	src, srcSpec, err := r.handle(ctx, r.from)
	if err != nil || src == nil {
		return err // no handle: nothing was allocated
	}
	moved := map[netip.Prefix]int{}
	var blocks []*unstructured.Unstructured
	for cidr := range srcSpec.Block {
		prefix, err := netip.ParsePrefix(cidr)
		if err != nil {
			return fmt.Errorf("handle %s names block %q: %w", r.from, cidr, err)
		}
		obj, n, err := r.renameIn(ctx, prefix)
		if err != nil {
			return err
		}
		if n > 0 {
			moved[prefix] = n
			blocks = append(blocks, obj)
		}
	}
	if len(moved) == 0 {
		return nil // calico-ipam did not know the pod: nothing to move
	}
	if err := r.addToHandle(ctx, moved); err != nil {
		return err
	}
	for _, obj := range blocks {
		if _, err := r.resource(calico.PluralIPAMBlocks).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating block %s: %w", obj.GetName(), err)
		}
	}
	return r.removeFromHandle(ctx, src, srcSpec, moved)
}

// handle reads the handle with id, nil when absent.
func (r *kubeRekey) handle(ctx context.Context, id string) (*unstructured.Unstructured, *calico.IPAMHandleSpec, error) {
	obj, err := r.resource(calico.PluralIPAMHandles).Get(ctx, calico.HandleName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading handle %s: %w", id, err)
	}
	var spec calico.IPAMHandleSpec
	if err := specOf(obj, &spec); err != nil {
		return nil, nil, fmt.Errorf("handle %s: %w", id, err)
	}
	return obj, &spec, nil
}

// renameIn renames the handle of the pod's attributes in one block and
// returns the block to write and how many addresses moved.
func (r *kubeRekey) renameIn(ctx context.Context, cidr netip.Prefix) (*unstructured.Unstructured, int, error) {
	obj, err := r.resource(calico.PluralIPAMBlocks).Get(ctx, calico.BlockName(cidr), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading block %s: %w", cidr, err)
	}
	var spec calico.IPAMBlockSpec
	if err := specOf(obj, &spec); err != nil {
		return nil, 0, fmt.Errorf("block %s: %w", cidr, err)
	}
	renamed := map[int]bool{}
	for i, a := range spec.Attributes {
		if a.HandleID != nil && *a.HandleID == r.from && a.Secondary["namespace"] == r.pod.Namespace && a.Secondary["pod"] == r.pod.Name {
			to := r.to
			spec.Attributes[i].HandleID = &to
			renamed[i] = true
		}
	}
	n := 0
	for _, idx := range spec.Allocations {
		if idx != nil && renamed[*idx] {
			n++
		}
	}
	if n == 0 {
		return nil, 0, nil
	}
	return obj, n, setSpec(obj, spec)
}

func (r *kubeRekey) addToHandle(ctx context.Context, moved map[netip.Prefix]int) error {
	dst, spec, err := r.handle(ctx, r.to)
	if err != nil {
		return err
	}
	h := calico.NewHandle()
	if spec != nil {
		h = spec.Handle()
	}
	for cidr, n := range moved {
		h.Add(cidr, n)
	}
	res := r.resource(calico.PluralIPAMHandles)
	if dst == nil {
		dst = &unstructured.Unstructured{}
		dst.SetAPIVersion(calico.KDDAPIVersion)
		dst.SetKind(calico.KindIPAMHandle)
		dst.SetName(calico.HandleName(r.to))
		dst.SetAnnotations(map[string]string{calico.AnnotationMetadata: calico.MetadataAnnotation(nil)})
		if err := setSpec(dst, calico.NewIPAMHandleSpec(r.to, h)); err != nil {
			return err
		}
		_, err = res.Create(ctx, dst, metav1.CreateOptions{})
	} else if err = setSpec(dst, calico.NewIPAMHandleSpec(r.to, h)); err == nil {
		_, err = res.Update(ctx, dst, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing handle %s: %w", r.to, err)
	}
	return nil
}

// removeFromHandle takes the moved addresses off the old handle; an empty
// one is deleted as Calico deletes: marked deleted, then removed with
// preconditions.
func (r *kubeRekey) removeFromHandle(ctx context.Context, obj *unstructured.Unstructured, spec *calico.IPAMHandleSpec, moved map[netip.Prefix]int) error {
	h := spec.Handle()
	for cidr, n := range moved {
		h.Remove(cidr, n)
	}
	h.Deleted = h.Empty()
	if err := setSpec(obj, calico.NewIPAMHandleSpec(spec.HandleID, h)); err != nil {
		return err
	}
	res := r.resource(calico.PluralIPAMHandles)
	updated, err := res.Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating handle %s: %w", r.from, err)
	}
	if !h.Deleted {
		return nil
	}
	uid, rv := updated.GetUID(), updated.GetResourceVersion()
	err = res.Delete(ctx, updated.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil {
		return fmt.Errorf("deleting handle %s: %w", r.from, err)
	}
	return nil
}

// specOf decodes an object's spec into v.
func specOf(obj *unstructured.Unstructured, v any) error {
	raw, err := json.Marshal(obj.Object["spec"])
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// setSpec replaces an object's spec with v, keeping the keys v does not
// model.
func setSpec(obj *unstructured.Unstructured, v any) error {
	old, err := json.Marshal(obj.Object["spec"])
	if err != nil {
		return err
	}
	data, err := calico.MarshalSpecKeeping(old, v)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return err
	}
	obj.Object["spec"] = spec
	return nil
}
