// Package calico describes the data Calico's IPAM keeps in etcd (datastore
// etcdv3): allocation blocks, handles, host affinities and the IPPool and
// Node resources IPAM depends on.
//
// The types are written from the observed on-disk JSON, not from Calico's
// code, and marshal to the same bytes: field order follows struct order and
// maps marshal with sorted keys, as Calico's own Go encoder does. Keeping
// the bytes identical matters because tools that rewrite a block must not
// change what Calico reads back.
package calico
