// Package calicosim simulates calico-ipam, Calico's CNI IPAM plugin, for
// tests. The real binary cannot be built here, so the simulator reproduces
// everything a wrapper can observe: the config it reads, its CNI results
// and errors, its handle naming across Calico generations, and the exact
// etcd layout (blocks, handles, host affinities) described in
// ipam/calico.
//
// Writes are etcd transactions guarded by the revisions of every key they
// change, so concurrent callers never hand out the same address even
// without the host lock file.
package calicosim
