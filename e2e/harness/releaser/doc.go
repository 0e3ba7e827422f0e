// Package releaser plays Calico's kube-controllers for the e2e suites:
// the outside party that frees Calico IPAM addresses it believes leaked.
// On a deleted Kubernetes Node it releases the node's allocations, its
// blocks' affinities and (etcd datastore) Calico's Node; for a live node
// it releases an allocation whose pod is gone, or runs on another node
// than the allocation names, once the leak grace period has passed.
//
// Start runs Calico's real kube-controllers when CALICO_KUBE_CONTROLLERS
// names a binary built from projectcalico/calico
// (kube-controllers/cmd/kube-controllers), and the simulator otherwise.
// The simulator follows the real controller's rules (the node controller's
// IPAM garbage collection and, on etcd, its node deleter) and writes what
// it writes, in the same order, each write guarded by the version it read,
// on either datastore: etcdv3, or the Kubernetes datastore's
// crd.projectcalico.org/v1 objects.
//
// On etcd, kube-controllers knows a Calico Node's Kubernetes node only by
// its spec.orchRefs: SeedNode writes Calico's Node as calico-node does.
package releaser
