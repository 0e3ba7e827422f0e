package releaser

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// SeedNode writes Calico's Node calicoName in etcd as calico-node writes it
// on a Kubernetes node: spec.orchRefs names its Kubernetes node k8sName.
// kube-controllers maps an allocation's node attribute to a Kubernetes
// node only through that reference: a Calico Node without it is a
// non-Kubernetes node, whose addresses it never releases. A stale Calico
// node name (Calico issue 12257) is calicoName != k8sName.
func SeedNode(ctx context.Context, cli *clientv3.Client, calicoName, k8sName string) error {
	node := map[string]any{
		"kind":       calico.KindNode,
		"apiVersion": calico.APIVersion,
		"metadata":   map[string]any{"name": calicoName, "uid": string(uuid.NewUUID()), "creationTimestamp": time.Now().UTC().Format(time.RFC3339)},
		"spec":       map[string]any{"orchRefs": []map[string]string{{"nodeName": k8sName, "orchestrator": "k8s"}}},
	}
	data, err := json.Marshal(node)
	if err != nil {
		return err
	}
	if _, err := cli.Put(ctx, calico.NodeKey(calicoName), string(data)); err != nil {
		return fmt.Errorf("seeding Calico Node %s: %w", calicoName, err)
	}
	return nil
}
