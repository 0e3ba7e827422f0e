// Package calicosim simulates calico-ipam, Calico's CNI IPAM plugin, for
// tests. The real binary cannot be built here, so the simulator reproduces
// everything a wrapper can observe: the config it reads, its CNI results
// and errors, its handle naming across Calico generations, and the data
// it writes, described in ipam/calico, on either of Calico's datastores:
//
//   - etcdv3: blocks, handles and host affinities under /calico/ipam/v2/.
//     Writes are etcd transactions guarded by the revisions of every key
//     they change.
//   - kubernetes (KDD): IPAMBlock, IPAMHandle and BlockAffinity objects of
//     crd.projectcalico.org/v1 through the apiserver, written one at a
//     time in calico-ipam's order, each guarded by its resourceVersion,
//     and deleted as Calico deletes them (marked deleted, then a DELETE
//     with preconditions).
//
// The datastore comes from the config alone (datastore_type, or inferred
// as Calico infers it). Either way concurrent callers never hand out the
// same address, even without the host lock file. One difference from
// Calico is deliberate: a node claims the first free block of a pool,
// where Calico picks a pseudo-random one seeded by the host name.
package calicosim
