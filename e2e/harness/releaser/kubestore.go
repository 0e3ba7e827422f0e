package releaser

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
)

var (
	blocksGVR     = schema.GroupVersionResource{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: calico.PluralIPAMBlocks}
	affinitiesGVR = schema.GroupVersionResource{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: calico.PluralBlockAffinities}
)

// kubeStore is Calico's Kubernetes datastore (crd.projectcalico.org/v1).
// As in Calico's KDD backend, an update carries the resourceVersion read,
// and a delete first marks the object deleted (so a racing writer loses)
// then deletes exactly that object.
type kubeStore struct {
	*datastore.KubeStore
	cfg *rest.Config
	dyn dynamic.Interface
}

func newKubeStore(cfg *rest.Config) (*kubeStore, error) {
	ks, err := datastore.NewKubeForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &kubeStore{KubeStore: ks, cfg: cfg, dyn: ks.Client}, nil
}

// calicoNodes: on KDD Calico's Node is the Kubernetes Node, so each maps
// to itself, and a deleted one is simply gone.
func (k *kubeStore) calicoNodes(_ context.Context, k8sNodes map[string]bool) (map[string]calicoNode, error) {
	nodes := map[string]calicoNode{}
	for name := range k8sNodes {
		nodes[name] = calicoNode{k8sName: name}
	}
	return nodes, nil
}

func (k *kubeStore) snapshot(ctx context.Context) (*calicosim.Snapshot, error) {
	return calicosim.KubeState(ctx, k.cfg)
}

// deleteNode is never called: only etcd has a node deleter.
func (k *kubeStore) deleteNode(context.Context, string, *slog.Logger) error { return nil }

func (k *kubeStore) deleteBlock(ctx context.Context, b *datastore.Block) error {
	obj, err := k.dyn.Resource(blocksGVR).Get(ctx, calico.BlockName(b.Block.CIDR), metav1.GetOptions{})
	if err != nil {
		return kubeError(err)
	}
	if obj.GetResourceVersion() != string(b.Version) {
		return fmt.Errorf("block %s: %w", b.Block.CIDR, errConflict)
	}
	return k.markAndDelete(ctx, blocksGVR, obj, true)
}

// markAndDelete sets spec.deleted (a bool on blocks, a string on
// affinities), then deletes the marked object by uid and resourceVersion.
func (k *kubeStore) markAndDelete(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, deleted any) error {
	if err := unstructured.SetNestedField(obj.Object, deleted, "spec", "deleted"); err != nil {
		return err
	}
	marked, err := k.dyn.Resource(gvr).Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return kubeError(err)
	}
	uid, rv := marked.GetUID(), marked.GetResourceVersion()
	err = k.dyn.Resource(gvr).Delete(ctx, marked.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return kubeError(err)
}

// kubeError maps a lost race (conflict, or the object gone) to
// errConflict.
func kubeError(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %w", errConflict, err)
	}
	return err
}

func affinitySpec(obj *unstructured.Unstructured) (calico.BlockAffinitySpec, error) {
	var s calico.BlockAffinitySpec
	data, err := json.Marshal(obj.Object["spec"])
	if err == nil {
		err = json.Unmarshal(data, &s)
	}
	return s, err
}

// affinities lists node's BlockAffinities by its hostname-hash label, as
// Calico does, IPv4 first.
func (k *kubeStore) affinities(ctx context.Context, node string) ([]netip.Prefix, error) {
	list, err := k.dyn.Resource(affinitiesGVR).List(ctx, metav1.ListOptions{LabelSelector: calico.LabelHostnameHash + "=" + calico.HostnameHash(node)})
	if err != nil {
		return nil, fmt.Errorf("listing %s's affinities: %w", node, err)
	}
	var out []netip.Prefix
	for i := range list.Items {
		s, err := affinitySpec(&list.Items[i])
		if err != nil {
			return nil, err
		}
		_, cidr, a, err := s.Affinity()
		if err != nil {
			return nil, err
		}
		if s.Node == node && !a.Deleted {
			out = append(out, cidr)
		}
	}
	slices.SortFunc(out, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	return out, nil
}

func (k *kubeStore) affinity(ctx context.Context, node string, cidr netip.Prefix) (*affinityRef, error) {
	obj, err := k.dyn.Resource(affinitiesGVR).Get(ctx, calico.AffinityName(node, cidr), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, err := affinitySpec(obj)
	if err != nil {
		return nil, err
	}
	_, _, aff, err := s.Affinity()
	if err != nil {
		return nil, err
	}
	if aff.Deleted {
		// Calico finishes a delete it finds half done, and reads nothing.
		return nil, k.markAndDelete(ctx, affinitiesGVR, obj, "true")
	}
	return &affinityRef{node: node, cidr: cidr, affinity: aff, version: datastore.Version(obj.GetResourceVersion()), obj: obj}, nil
}

func (k *kubeStore) putAffinity(ctx context.Context, a *affinityRef) error {
	old, err := json.Marshal(a.obj.Object["spec"])
	if err != nil {
		return err
	}
	data, err := calico.MarshalSpecKeeping(old, calico.NewBlockAffinitySpec(a.node, a.cidr, a.affinity))
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return err
	}
	a.obj.Object["spec"] = spec
	out, err := k.dyn.Resource(affinitiesGVR).Update(ctx, a.obj, metav1.UpdateOptions{})
	if err != nil {
		return kubeError(err)
	}
	a.obj, a.version = out, datastore.Version(out.GetResourceVersion())
	return nil
}

func (k *kubeStore) deleteAffinity(ctx context.Context, a *affinityRef) error {
	return k.markAndDelete(ctx, affinitiesGVR, a.obj, "true")
}
