// Package datastore is Calico's IPAM data as the admin commands (audit,
// repair, adopt) need it, whichever datastore calico-ipam uses: etcd
// (etcdv3) or the Kubernetes API (crd.projectcalico.org/v1 IPAMBlock,
// IPAMHandle and BlockAffinity objects). Both implementations live side by
// side here, and datastoretest is the one contract they both pass.
//
// Every write is guarded by the version each object was read at, so a
// concurrent calico-ipam is never overwritten: the loser gets ErrConflict
// and starts again from a fresh read.
package datastore

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// Kinds, as the datastore names them.
const (
	Etcd       = "etcdv3"
	Kubernetes = "kubernetes"
)

// ErrConflict means an object was no longer at the version it was read at
// (or appeared, or vanished): another writer won the race.
var ErrConflict = errors.New("changed since it was read")

// Version is the version an object was read at: etcd's mod revision, or
// the Kubernetes resourceVersion. "" means the object was absent.
type Version string

// Datastore is Calico's IPAM data.
type Datastore interface {
	// Kind is Etcd or Kubernetes.
	Kind() string
	// Scan reads every block, handle and affinity, page by page, as one
	// consistent view (etcd: one revision; Kubernetes: one resourceVersion
	// for the three lists) and hands each to v as it goes, so that a large
	// datastore is never held twice in memory. A document that does not
	// decode goes to v.Undecodable and the scan goes on; a datastore that
	// cannot be read completely is an error, never an empty scan.
	Scan(ctx context.Context, v Visitor) (Point, error)
	// Block reads one block; nil when absent.
	Block(ctx context.Context, cidr netip.Prefix) (*Block, error)
	// Handle reads one handle document; nil when absent.
	Handle(ctx context.Context, id string) (*Handle, error)
	// Write makes c, each object only if it is still at the version it
	// was read at; ErrConflict (wrapped) when one was not.
	Write(ctx context.Context, c Change) error
	// NodeExists says whether Calico knows node name: its Node resource
	// (etcd), the Kubernetes Node (the Kubernetes datastore). Its absence,
	// in a datastore that answered, is the evidence kube-controllers acts
	// on when it frees a deleted node's addresses; any failure to read is
	// an error, never "absent".
	NodeExists(ctx context.Context, name string) (bool, error)
	// Nodes lists every Node Calico knows, by name, in one listing (paged,
	// at one revision or resourceVersion): what a sweep of every node's
	// records compares them with, instead of one read per node. A listing
	// that does not complete is an error, never a shorter list.
	Nodes(ctx context.Context) ([]string, error)
	Close() error
}

// Visitor receives what Scan reads. Every field but Read must be set,
// except that Handle and Affinity may be nil together: the scan then
// reads only the blocks (on etcd their prefix, on Kubernetes the
// IPAMBlock list), which is all a reader of who holds each address needs.
type Visitor struct {
	// Read, when set, is told where the scan reads as soon as the scan
	// knows it, before it visits anything, where the datastore can say
	// (etcd's revision): a reader of safe-ipam's records at that point
	// can read them beside the scan.
	Read  func(Point)
	Block func(b *calico.Block)
	// Handle gets a handle document's per-block counts as stored (the
	// etcd "block" key, the Kubernetes spec.block) and its version.
	Handle      func(id string, counts json.RawMessage, v Version)
	Affinity    func(node string, cidr netip.Prefix)
	Undecodable func(key string, err error)
}

// blocksOnly says the visitor wants only the blocks.
func (v Visitor) blocksOnly() bool { return v.Handle == nil && v.Affinity == nil }

// check refuses a visitor a scan would call a nil function of.
func (v Visitor) check() error {
	if v.Block == nil || v.Undecodable == nil || (v.Handle == nil) != (v.Affinity == nil) {
		return errors.New("scan: a Visitor needs Block and Undecodable, and Handle and Affinity both or neither")
	}
	return nil
}

// Point says where a scan read: etcd's revision (records in the same etcd
// are read at it), or the Kubernetes resourceVersion of the lists.
type Point struct {
	Revision        int64
	ResourceVersion string
}

// Block is one block as read.
type Block struct {
	Block   *calico.Block
	Version Version
	// doc is the stored document: a rewrite keeps every field Block does
	// not model (and on Kubernetes the object's metadata).
	doc []byte
}

// Handle is one handle document as read, or to be written.
type Handle struct {
	// ID is the handle ID with its case (on Kubernetes, spec.handleID;
	// the object's name is its lowercase form).
	ID      string
	Handle  *calico.Handle
	Version Version
	// doc is the stored object on Kubernetes, whose metadata and unmodelled
	// spec fields a rewrite keeps.
	doc []byte
}

// Change is one guarded write: changed blocks, then the handle document.
type Change struct {
	// Blocks are rewritten (Version "" creates one).
	Blocks []*Block
	// Compared are blocks read and not changed that must still be at
	// their version: etcd compares them in the Txn; Kubernetes, which has
	// no multi-object guard, re-reads them just before it writes.
	Compared []*Block
	// Handle is the handle as read (Version "" when it was absent) with
	// its new counts; nil or empty counts delete it.
	Handle *Handle
	// HandleFirst writes the handle before the blocks, as calico-ipam does
	// when it allocates; otherwise blocks go first, as on release. Where
	// the datastore has no transaction (Kubernetes), an interrupted write
	// then leaves a handle that counts too many, never a block address no
	// handle document names: the audit reports it and fix-handle-count
	// repairs it.
	HandleFirst bool
}

// deletesHandle says whether c removes the handle document.
func (c Change) deletesHandle() bool {
	return c.Handle != nil && (c.Handle.Handle == nil || c.Handle.Handle.Empty())
}
