package calicosim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// kind is one resource type calico-ipam uses on the Kubernetes datastore.
type kind struct {
	gvr  schema.GroupVersionResource
	name string // the kind, as Calico's errors name it
	// calicoResource is how Calico's client names the resource in the
	// error of a request to a resource the apiserver does not serve.
	calicoResource string
}

func calicoKind(plural, name, calicoResource string) kind {
	gvr := schema.GroupVersionResource{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: plural}
	return kind{gvr: gvr, name: name, calicoResource: calicoResource}
}

var (
	kindBlock       = calicoKind(calico.PluralIPAMBlocks, calico.KindIPAMBlock, "IPAMBlocks")
	kindHandle      = calicoKind(calico.PluralIPAMHandles, calico.KindIPAMHandle, "IPAMHandles")
	kindAffinity    = calicoKind(calico.PluralBlockAffinities, calico.KindBlockAffinity, "BlockAffinities")
	kindPool        = calicoKind(calico.PluralIPPools, calico.KindIPPool, "IPPools")
	kindNode        = kind{gvr: schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, name: "Node"}
	kindNamespace   = kind{gvr: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, name: "Namespace"}
	gvrCRD          = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	kubeClientQPS   = float32(100)
	kubeClientBurst = 200
)

// NewKubeClient returns a dynamic client for the kubeconfig at path, or
// for the pod's service account when path is empty, as calico-ipam does.
func NewKubeClient(path string) (dynamic.Interface, error) {
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes datastore: loading kubeconfig %q: %w", path, err)
	}
	return newDynamic(cfg)
}

// newDynamic allows more requests per second than client-go's default of
// 5: concurrent ADDs in tests would otherwise wait on the rate limiter.
func newDynamic(cfg *rest.Config) (dynamic.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = kubeClientQPS, kubeClientBurst
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes datastore: %w", err)
	}
	return dyn, nil
}

// kubeObject is a KDD object with its spec left encoded, so that fields
// the model does not know survive a rewrite.
type kubeObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       json.RawMessage   `json:"spec,omitempty"`
}

// newKubeObject is a new object of k called name with Calico's metadata
// annotation for the labels.
func newKubeObject(k kind, name string, labels map[string]string, spec any) (*kubeObject, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encoding %s(%s): %w", k.name, name, err)
	}
	return &kubeObject{
		APIVersion: k.gvr.GroupVersion().String(),
		Kind:       k.name,
		Metadata: metav1.ObjectMeta{
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{calico.AnnotationMetadata: calico.MetadataAnnotation(labels)},
		},
		Spec: raw,
	}, nil
}

func (o *kubeObject) unstructured() (*unstructured.Unstructured, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("encoding %s(%s): %w", o.Kind, o.Metadata.Name, err)
	}
	u := &unstructured.Unstructured{}
	// UnmarshalJSON keeps integers as int64: sequence numbers exceed 2^53.
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("encoding %s(%s): %w", o.Kind, o.Metadata.Name, err)
	}
	return u, nil
}

func fromUnstructured(u *unstructured.Unstructured) (*kubeObject, error) {
	data, err := u.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("decoding %s(%s): %w", u.GetKind(), u.GetName(), err)
	}
	var o kubeObject
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, fmt.Errorf("decoding %s(%s): %w", u.GetKind(), u.GetName(), err)
	}
	return &o, nil
}

// decodeSpec decodes the object's spec into v.
func (o *kubeObject) decodeSpec(v any) error {
	if err := json.Unmarshal(o.Spec, v); err != nil {
		return fmt.Errorf("decoding the spec of %s(%s): %w", o.Kind, o.Metadata.Name, err)
	}
	return nil
}

// withSpec returns a copy of o whose spec is spec, keeping the spec keys
// spec does not model.
func (o *kubeObject) withSpec(spec any) (*kubeObject, error) {
	raw, err := calico.MarshalSpecKeeping(o.Spec, spec)
	if err != nil {
		return nil, fmt.Errorf("encoding the spec of %s(%s): %w", o.Kind, o.Metadata.Name, err)
	}
	c := *o
	c.Spec = raw
	// Left out, the apiserver keeps the recorded managers.
	c.Metadata.ManagedFields = nil
	return &c, nil
}

// markedDeleted reports whether the object carries Calico's deletion
// mark: deleted true (the string "true" on affinities).
func (o *kubeObject) markedDeleted() bool {
	var s struct {
		Deleted any `json:"deleted"`
	}
	_ = json.Unmarshal(o.Spec, &s) // an unreadable spec is not marked
	return s.Deleted == true || s.Deleted == "true"
}

// resourceMissing is calico-ipam's failure when the apiserver does not
// serve a resource it creates, such as a CRD that is not installed.
type resourceMissing struct {
	k    kind
	name string
}

func (e *resourceMissing) Error() string {
	return fmt.Sprintf("resource does not exist: %s(%s) with error: the server could not find the requested resource (post %s.%s)",
		e.k.name, e.name, e.k.calicoResource, e.k.gvr.Group)
}

// writeError turns the apiserver's answer to a write into errConflict
// when another writer won: the caller re-reads and tries again.
func writeError(k kind, name, verb string, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return errConflict
	case apierrors.IsNotFound(err) && verb == "create":
		return &resourceMissing{k: k, name: name}
	case apierrors.IsNotFound(err):
		return errConflict // deleted since it was read
	}
	return fmt.Errorf("%s %s(%s): %w", verb, k.name, name, err)
}

// kubeClient does calico-ipam's reads and writes of KDD objects.
type kubeClient struct {
	dyn dynamic.Interface
	// readOnly leaves objects marked deleted in place; they are still
	// treated as absent.
	readOnly bool
}

// get returns the object, nil when it does not exist or the resource is
// not served. An object marked deleted is deleted for good first, as
// Calico's readers do, and is then absent too.
func (c kubeClient) get(ctx context.Context, k kind, name string) (*kubeObject, error) {
	u, err := c.dyn.Resource(k.gvr).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s(%s): %w", k.name, name, err)
	}
	o, err := fromUnstructured(u)
	if err != nil {
		return nil, err
	}
	if o.markedDeleted() {
		return nil, c.finishDelete(ctx, k, o)
	}
	return o, nil
}

// list returns every object of k; none when the resource is not served.
// Objects marked deleted are deleted for good and left out.
func (c kubeClient) list(ctx context.Context, k kind, selector string) ([]*kubeObject, error) {
	l, err := c.dyn.Resource(k.gvr).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", k.gvr.Resource, err)
	}
	var out []*kubeObject
	for i := range l.Items {
		o, err := fromUnstructured(&l.Items[i])
		if err != nil {
			return nil, err
		}
		if o.markedDeleted() {
			if err := c.finishDelete(ctx, k, o); err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

func (c kubeClient) create(ctx context.Context, k kind, o *kubeObject) (*kubeObject, error) {
	return c.write(k, o, "create", func(u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return c.dyn.Resource(k.gvr).Create(ctx, u, metav1.CreateOptions{})
	})
}

// update writes o, guarded by its resourceVersion.
func (c kubeClient) update(ctx context.Context, k kind, o *kubeObject) (*kubeObject, error) {
	return c.write(k, o, "update", func(u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return c.dyn.Resource(k.gvr).Update(ctx, u, metav1.UpdateOptions{})
	})
}

// write sends o with send and returns what the apiserver stored.
func (c kubeClient) write(k kind, o *kubeObject, verb string, send func(*unstructured.Unstructured) (*unstructured.Unstructured, error)) (*kubeObject, error) {
	u, err := o.unstructured()
	if err != nil {
		return nil, err
	}
	stored, err := send(u)
	if err := writeError(k, o.Metadata.Name, verb, err); err != nil {
		return nil, err
	}
	return fromUnstructured(stored)
}

// remove deletes o the way Calico does, since Kubernetes has no
// compare-and-delete: an update marks it deleted, guarded by the version
// o was read at, then a DELETE with that update's UID and version as
// preconditions.
func (c kubeClient) remove(ctx context.Context, k kind, o *kubeObject, mark any) error {
	marked, err := o.withSpec(mark)
	if err != nil {
		return err
	}
	if marked, err = c.update(ctx, k, marked); err != nil {
		return err
	}
	return c.finishDelete(ctx, k, marked)
}

// finishDelete deletes an object marked deleted. Someone else finishing
// it first is fine: once marked, the object is gone for every reader.
func (c kubeClient) finishDelete(ctx context.Context, k kind, o *kubeObject) error {
	if c.readOnly {
		return nil
	}
	uid, rv := o.Metadata.UID, o.Metadata.ResourceVersion
	err := c.dyn.Resource(k.gvr).Delete(ctx, o.Metadata.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
	})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return fmt.Errorf("deleting %s(%s): %w", k.name, o.Metadata.Name, err)
}

// modify re-reads the object called name and applies change until the
// update wins; change returns nil to leave the object alone.
func (c kubeClient) modify(ctx context.Context, k kind, name string, change func(*kubeObject) (*kubeObject, error)) (*kubeObject, error) {
	for {
		o, err := c.get(ctx, k, name)
		if err != nil {
			return nil, err
		}
		next, err := change(o)
		if err != nil || next == nil {
			return o, err
		}
		done, err := c.update(ctx, k, next)
		if !errors.Is(err, errConflict) {
			return done, err
		}
		if err := pause(ctx, time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
