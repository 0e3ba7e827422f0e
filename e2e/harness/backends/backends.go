// Package backends gives the datastore contract (datastoretest) and the
// tests of audit, repair and adopt Calico's datastores over real servers:
// Calico's data in a real etcd, or Calico's CRDs in a real kube-apiserver,
// emptied first, with ways to plant what calico-ipam could leave.
package backends

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore/datastoretest"
)

// Etcd is a backend over Calico's data in cli's etcd, emptied first.
func Etcd(t *testing.T, cli *clientv3.Client) *datastoretest.Backend {
	t.Helper()
	if _, err := cli.Delete(context.Background(), calico.IPAMPrefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	ds := datastore.NewEtcd(cli)
	put := func(t *testing.T, key, value string) {
		t.Helper()
		if _, err := cli.Put(context.Background(), key, value); err != nil {
			t.Fatal(err)
		}
	}
	return &datastoretest.Backend{
		Store:       ds,
		SetPageSize: func(n int64) { ds.PageSize = n },
		Affinity: func(t *testing.T, node string, cidr netip.Prefix, deleted bool) {
			put(t, calico.AffinityKey(node, cidr), fmt.Sprintf(`{"state":"confirmed","deleted":%t}`, deleted))
		},
		Garble: func(t *testing.T, cidr netip.Prefix) { put(t, calico.BlockKey(cidr), "{") },
		MarkDeleted: func(t *testing.T, handle string) {
			put(t, calico.HandleKey(handle), `{"block":{"10.244.0.0/26":1},"deleted":true}`)
		},
		Node: func(t *testing.T, name string) {
			put(t, calico.NodeKey(name), `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"`+name+`"},"spec":{}}`)
		},
	}
}

// KubeServer is srv with Calico's IPAM CRDs applied.
func KubeServer(t *testing.T, shared *kubetest.Shared) *kubetest.Server {
	t.Helper()
	crds := calicodata.Require(t, calicodata.CRDs)
	srv := shared.Get(t)
	if err := srv.Apply(crds); err != nil {
		t.Fatal(err)
	}
	return srv
}

// Kube is a backend over Calico's KDD objects in srv, emptied first. Its
// planted objects are written with a dynamic client, as calico-ipam
// writes them.
func Kube(t *testing.T, srv *kubetest.Server) *datastoretest.Backend {
	t.Helper()
	dyn, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, plural := range []string{calico.PluralIPAMBlocks, calico.PluralIPAMHandles, calico.PluralBlockAffinities} {
		if err := dyn.Resource(gvr(plural)).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := datastore.NewKubeForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	k := kubePlanter{dyn: dyn}
	return &datastoretest.Backend{
		Store:       ds,
		SetPageSize: func(n int64) { ds.PageSize = n },
		Affinity:    k.affinity,
		Garble:      k.garble,
		MarkDeleted: k.markDeleted,
		Node:        k.node,
	}
}

func gvr(plural string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: plural}
}

type kubePlanter struct{ dyn dynamic.Interface }

func (k kubePlanter) create(t *testing.T, plural, kind, name string, spec map[string]any) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	obj.SetAPIVersion(calico.KDDAPIVersion)
	obj.SetKind(kind)
	obj.SetName(name)
	if _, err := k.dyn.Resource(gvr(plural)).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (k kubePlanter) affinity(t *testing.T, node string, cidr netip.Prefix, deleted bool) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"node": node, "cidr": cidr.String(), "state": "confirmed", "type": "host", "deleted": fmt.Sprint(deleted)}}}
	obj.SetAPIVersion(calico.KDDAPIVersion)
	obj.SetKind(calico.KindBlockAffinity)
	obj.SetName(calico.AffinityName(node, cidr))
	obj.SetLabels(calico.AffinityLabels(node, cidr))
	if _, err := k.dyn.Resource(gvr(calico.PluralBlockAffinities)).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// garble writes a block the API server accepts (it matches the CRD's
// schema) but whose CIDR does not parse.
func (k kubePlanter) garble(t *testing.T, cidr netip.Prefix) {
	t.Helper()
	k.create(t, calico.PluralIPAMBlocks, calico.KindIPAMBlock, calico.BlockName(cidr), map[string]any{
		"cidr": "not-a-cidr", "allocations": []any{}, "unallocated": []any{}, "attributes": []any{}, "deleted": false, "strictAffinity": false})
}

// markDeleted is the first half of Calico's delete: spec.deleted true.
func (k kubePlanter) markDeleted(t *testing.T, handle string) {
	t.Helper()
	r := k.dyn.Resource(gvr(calico.PluralIPAMHandles))
	obj, err := r.Get(context.Background(), calico.HandleName(handle), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(obj.Object, true, "spec", "deleted"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// node registers a Kubernetes Node, as a kubelet does.
func (k kubePlanter) node(t *testing.T, name string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{}}
	obj.SetAPIVersion("v1")
	obj.SetKind("Node")
	obj.SetName(name)
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	if _, err := k.dyn.Resource(nodes).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.dyn.Resource(nodes).Delete(context.Background(), name, metav1.DeleteOptions{}) })
}
