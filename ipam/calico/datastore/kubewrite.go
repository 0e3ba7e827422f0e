package datastore

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// Write implements Datastore one object at a time, in calico-ipam's
// order: a release frees the blocks, then drops the handle; a claim
// (HandleFirst) counts the handle, then allocates in the block. Each
// Update carries the resourceVersion the object was read at, so the API
// server refuses it (409, ErrConflict) if anyone wrote the object since.
// An interrupted or half-lost Change therefore leaves only a handle that
// counts more than its blocks hold, which the audit reports and
// fix-handle-count repairs; never an allocation no handle names.
func (k *KubeStore) Write(ctx context.Context, c Change) error {
	if err := k.stillAt(ctx, c.Compared); err != nil {
		return err
	}
	steps := []func() error{
		func() error { return k.writeBlocks(ctx, c.Blocks) },
		func() error { return k.writeHandle(ctx, c) },
	}
	if c.HandleFirst {
		steps[0], steps[1] = steps[1], steps[0]
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// stillAt re-reads blocks that must not have changed. Without a
// transaction this narrows the window to the writes that follow; the
// handle's own version guards the rest.
func (k *KubeStore) stillAt(ctx context.Context, blocks []*Block) error {
	for _, b := range blocks {
		cur, err := k.Block(ctx, b.Block.CIDR)
		if err != nil {
			return err
		}
		if cur == nil || cur.Version != b.Version {
			return fmt.Errorf("block %s: %w", b.Block.CIDR, ErrConflict)
		}
	}
	return nil
}

func (k *KubeStore) writeBlocks(ctx context.Context, blocks []*Block) error {
	for _, b := range blocks {
		obj, err := objectFor(b.doc, calico.KindIPAMBlock, calico.BlockName(b.Block.CIDR), b.Version)
		if err != nil {
			return err
		}
		if err := setSpec(obj, calico.NewIPAMBlockSpec(b.Block)); err != nil {
			return err
		}
		if _, err := k.put(ctx, blocksGVR, obj, b.Version); err != nil {
			return err
		}
	}
	return nil
}

func (k *KubeStore) writeHandle(ctx context.Context, c Change) error {
	h := c.Handle
	if h == nil || (c.deletesHandle() && h.Version == "") {
		return nil
	}
	if err := calico.ValidateObjectName(calico.HandleName(h.ID)); err != nil {
		return fmt.Errorf("handle %s cannot be stored in the Kubernetes datastore: %w", h.ID, err)
	}
	obj, err := objectFor(h.doc, calico.KindIPAMHandle, calico.HandleName(h.ID), h.Version)
	if err != nil {
		return err
	}
	if c.deletesHandle() {
		return k.deleteHandle(ctx, obj)
	}
	if err := setSpec(obj, calico.NewIPAMHandleSpec(h.ID, h.Handle)); err != nil {
		return err
	}
	_, err = k.put(ctx, handlesGVR, obj, h.Version)
	return err
}

// deleteHandle deletes as Calico does, since the API has no
// compare-and-delete: an Update that sets spec.deleted (guarded by the
// version read, so a lost race is a conflict), then a DELETE whose
// preconditions name that very write. Once marked, every reader (Calico's
// and ours) treats the object as absent, and Calico's finishes a delete
// that was cut short.
func (k *KubeStore) deleteHandle(ctx context.Context, obj *unstructured.Unstructured) error {
	if err := unstructured.SetNestedField(obj.Object, true, "spec", "deleted"); err != nil {
		return err
	}
	marked, err := k.put(ctx, handlesGVR, obj, Version(obj.GetResourceVersion()))
	if err != nil {
		return err
	}
	return k.finishDelete(ctx, handlesGVR, marked)
}

// finishDelete removes an object marked deleted, as every reader of
// Calico's does: a mark whose DELETE was cut short would otherwise stand
// for ever, and each Create of that name would fail as a lost race. The
// preconditions name the marked object, so a newer one is never removed.
func (k *KubeStore) finishDelete(ctx context.Context, gvr schema.GroupVersionResource, marked *unstructured.Unstructured) error {
	uid, rv := marked.GetUID(), marked.GetResourceVersion()
	err := k.Client.Resource(gvr).Delete(ctx, marked.GetName(), metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// Someone wrote the marked object after it was read (a calico-ipam
		// that finished the delete and made it anew): theirs stands, and
		// the delete took effect at the mark.
		return nil
	}
	return k.explain("deleting "+marked.GetName()+" of", gvr, err)
}

// put creates obj (version "") or updates it at version; a lost race is
// ErrConflict.
func (k *KubeStore) put(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, version Version) (*unstructured.Unstructured, error) {
	r := k.Client.Resource(gvr)
	var out *unstructured.Unstructured
	var err error
	if version == "" {
		out, err = r.Create(ctx, obj, metav1.CreateOptions{})
	} else {
		out, err = r.Update(ctx, obj, metav1.UpdateOptions{})
	}
	switch {
	case err == nil:
		return out, nil
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err) && !missingResource(err):
		return nil, fmt.Errorf("%s %s: %w", gvr.Resource, obj.GetName(), ErrConflict)
	}
	return nil, k.explain("writing "+obj.GetName()+" of", gvr, err)
}

// objectFor is the object doc holds (as read), or a new one named name,
// at version: what an Update or Create sends.
func objectFor(doc []byte, kind, name string, version Version) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	if version != "" {
		if err := obj.UnmarshalJSON(doc); err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		obj.SetResourceVersion(string(version))
		return obj, nil
	}
	obj.SetAPIVersion(calico.KDDAPIVersion)
	obj.SetKind(kind)
	obj.SetName(name)
	obj.SetAnnotations(map[string]string{calico.AnnotationMetadata: calico.MetadataAnnotation(nil)})
	return obj, nil
}

// setSpec replaces obj's spec with spec, keeping the spec fields the type
// does not model.
func setSpec(obj *unstructured.Unstructured, spec any) error {
	old, err := json.Marshal(obj.Object["spec"])
	if err != nil {
		return err
	}
	data, err := calico.MarshalSpecKeeping(old, spec)
	if err != nil {
		return err
	}
	// Numbers stay int64 (sequenceNumber needs all 64 bits), as the
	// client decodes them.
	var m map[string]any
	if err := utiljson.Unmarshal(data, &m); err != nil {
		return err
	}
	obj.Object["spec"] = m
	return nil
}
