package datastore

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/etcdread"
	"github.com/safe-ipam/safe-ipam/ipam/etcdrange"
)

// pageSize bounds how many keys or objects one read holds at once.
const pageSize = 2000

// EtcdStore is Calico's etcdv3 datastore: JSON documents under
// calico.IPAMPrefix, written in one Txn that compares mod revisions.
type EtcdStore struct {
	Client *clientv3.Client
	// PageSize is the keys per read; 0 means 2000.
	PageSize int64
}

// NewEtcd is Calico's IPAM data in the etcd cli reaches. Close does not
// close cli: its owner does.
func NewEtcd(cli *clientv3.Client) *EtcdStore { return &EtcdStore{Client: cli} }

// Kind implements Datastore.
func (e *EtcdStore) Kind() string { return Etcd }

// Close implements Datastore.
func (e *EtcdStore) Close() error { return nil }

// Scan implements Datastore at one etcd revision.
func (e *EtcdStore) Scan(ctx context.Context, v Visitor) (Point, error) {
	var p Point
	if err := v.check(); err != nil {
		return p, err
	}
	page := e.PageSize
	if page <= 0 {
		page = pageSize
	}
	// Each page is decoded on every CPU while the one before is visited,
	// in key order.
	each, flush := etcdrange.Pipeline(decodeEtcd, func(d etcdDoc) error {
		d.visit(v)
		return nil
	})
	first, prefix := v.Read != nil, calico.IPAMPrefix
	if v.blocksOnly() {
		prefix = calico.BlockPrefix
	}
	at, err := etcdrange.Prefix(ctx, e.Client, prefix, page, p.Revision, func(resp *clientv3.GetResponse) error {
		if first {
			first = false
			v.Read(Point{Revision: resp.Header.Revision})
		}
		return each(resp)
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return p, fmt.Errorf("reading Calico IPAM data from etcd: %w", err)
	}
	p.Revision = at
	return p, nil
}

// etcdDoc is one decoded document of Calico's IPAM data in etcd.
type etcdDoc struct {
	key     string
	err     error
	kind    docKind
	block   *calico.Block
	handle  string // the handle's ID, for a handle document
	counts  json.RawMessage
	version Version
	node    string // the node and block of an affinity
	cidr    netip.Prefix
}

type docKind uint8

const (
	noDoc docKind = iota // deleted, or not IPAM data safe-ipam reads
	blockDoc
	handleDoc
	affinityDoc
)

// decodeEtcd decodes one key of Calico's IPAM data; a deleted or unknown
// one decodes to nothing.
func decodeEtcd(kv *mvccpb.KeyValue) etcdDoc {
	key := string(kv.Key)
	d := etcdDoc{key: key}
	switch {
	case strings.HasPrefix(key, calico.BlockPrefix):
		var b calico.Block
		if d.err = calico.DecodeBlock(kv.Value, &b); d.err == nil && !b.Deleted {
			d.kind, d.block = blockDoc, &b
		}
	case strings.HasPrefix(key, calico.HandlePrefix):
		var id string
		if id, d.err = calico.ParseHandleKey(key); d.err != nil {
			return d
		}
		var h handleFields
		if d.err = h.decode(kv.Value); d.err == nil && !h.Deleted {
			d.kind, d.handle, d.counts, d.version = handleDoc, id, h.Block, etcdVersion(kv.ModRevision)
		}
	case strings.HasPrefix(key, calico.HostPrefix):
		var node string
		var cidr netip.Prefix
		if node, cidr, d.err = calico.ParseAffinityKey(key); d.err != nil {
			return d
		}
		var a calico.Affinity
		if d.err = json.Unmarshal(kv.Value, &a); d.err == nil && !a.Deleted {
			d.kind, d.node, d.cidr = affinityDoc, node, cidr
		}
	}
	return d
}

func (d etcdDoc) visit(v Visitor) {
	switch {
	case d.err != nil:
		v.Undecodable(d.key, d.err)
	case d.kind == blockDoc:
		v.Block(d.block)
	case d.kind == handleDoc:
		v.Handle(d.handle, d.counts, d.version)
	case d.kind == affinityDoc:
		v.Affinity(d.node, d.cidr)
	}
}

func etcdVersion(modRev int64) Version {
	if modRev == 0 {
		return ""
	}
	return Version(strconv.FormatInt(modRev, 10))
}

// modRevision is the mod revision v names; 0 for an absent object, which
// is what etcd compares a missing key's mod revision with.
func modRevision(v Version) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("version %q is not an etcd revision", v)
	}
	return n, nil
}

// Block implements Datastore.
func (e *EtcdStore) Block(ctx context.Context, cidr netip.Prefix) (*Block, error) {
	var raw json.RawMessage
	rev, err := etcdread.ReadJSON(ctx, e.Client, calico.BlockKey(cidr), &raw)
	if err != nil || rev == 0 {
		return nil, err
	}
	var b calico.Block
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("decoding block %s: %w", cidr, err)
	}
	if b.Deleted {
		return nil, e.finishDelete(ctx, calico.BlockKey(cidr), rev)
	}
	return &Block{Block: &b, Version: etcdVersion(rev), doc: raw}, nil
}

// Handle implements Datastore.
func (e *EtcdStore) Handle(ctx context.Context, id string) (*Handle, error) {
	h := calico.NewHandle()
	rev, err := etcdread.ReadJSON(ctx, e.Client, calico.HandleKey(id), h)
	if err != nil || rev == 0 {
		return nil, err
	}
	if h.Deleted {
		return nil, e.finishDelete(ctx, calico.HandleKey(id), rev)
	}
	return &Handle{ID: id, Handle: h, Version: etcdVersion(rev)}, nil
}

// finishDelete removes a document marked deleted, if it is still the one
// read at rev, so that it reads as absent and can be created anew (a
// Write of an absent document compares a missing key).
func (e *EtcdStore) finishDelete(ctx context.Context, key string, rev int64) error {
	_, err := e.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("removing %s, marked deleted: %w", key, err)
	}
	return nil
}

// Write implements Datastore in one Txn.
func (e *EtcdStore) Write(ctx context.Context, c Change) error {
	return e.WriteComparing(ctx, c)
}

// WriteComparing is Write with more comparisons in the same Txn: repair
// compares the record a re-claim is for when records live in this etcd.
func (e *EtcdStore) WriteComparing(ctx context.Context, c Change, extra ...clientv3.Cmp) error {
	cmps, ops, err := etcdChange(c)
	if err != nil {
		return err
	}
	resp, err := e.Client.Txn(ctx).If(append(cmps, extra...)...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("writing Calico IPAM data to etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd Txn: %w", ErrConflict)
	}
	return nil
}

// etcdChange compares every document with the revision it was read at,
// and writes them. The order of puts inside one Txn does not matter.
func etcdChange(c Change) ([]clientv3.Cmp, []clientv3.Op, error) {
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for _, b := range c.Blocks {
		rev, err := modRevision(b.Version)
		if err != nil {
			return nil, nil, err
		}
		key := calico.BlockKey(b.Block.CIDR)
		data, err := calico.MarshalKeeping(b.doc, b.Block)
		if err != nil {
			return nil, nil, err
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
		ops = append(ops, clientv3.OpPut(key, string(data)))
	}
	for _, b := range c.Compared {
		rev, err := modRevision(b.Version)
		if err != nil {
			return nil, nil, err
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(calico.BlockKey(b.Block.CIDR)), "=", rev))
	}
	if c.Handle == nil {
		return cmps, ops, nil
	}
	rev, err := modRevision(c.Handle.Version)
	if err != nil {
		return nil, nil, err
	}
	key := calico.HandleKey(c.Handle.ID)
	cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
	if c.deletesHandle() {
		return cmps, append(ops, clientv3.OpDelete(key)), nil
	}
	data, err := json.Marshal(c.Handle.Handle)
	if err != nil {
		return nil, nil, err
	}
	return cmps, append(ops, clientv3.OpPut(key, string(data))), nil
}

// NodeExists implements Datastore: the Node resource's key.
func (e *EtcdStore) NodeExists(ctx context.Context, name string) (bool, error) {
	return etcdread.NodeKnown(ctx, e.Client, name)
}

// Nodes implements Datastore: the Node resources' keys alone, page by
// page at the first page's revision.
func (e *EtcdStore) Nodes(ctx context.Context) ([]string, error) {
	var names []string
	_, err := etcdrange.Prefix(ctx, e.Client, calico.NodePrefix, nodePage, 0, func(resp *clientv3.GetResponse) error {
		for _, kv := range resp.Kvs {
			if name, err := calico.ParseNodeKey(string(kv.Key)); err == nil {
				names = append(names, name)
			}
		}
		return nil
	}, clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("listing Calico's Nodes: %w", err)
	}
	return names, nil
}

// nodePage bounds one page of Node keys: some 100 bytes each.
const nodePage = 5000
