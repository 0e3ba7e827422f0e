package datastore

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
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
	err := ScanPrefix(ctx, e.Client, calico.IPAMPrefix, e.PageSize, &p.Revision, func(key string, value []byte, modRev int64) error {
		if err := visitEtcd(key, value, modRev, v); err != nil {
			v.Undecodable(key, err)
		}
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("reading Calico IPAM data from etcd: %w", err)
	}
	return p, nil
}

func visitEtcd(key string, value []byte, modRev int64, v Visitor) error {
	switch {
	case strings.HasPrefix(key, calico.BlockPrefix):
		var b calico.Block
		if err := json.Unmarshal(value, &b); err != nil {
			return err
		}
		if !b.Deleted {
			v.Block(&b)
		}
	case strings.HasPrefix(key, calico.HandlePrefix):
		id, err := calico.ParseHandleKey(key)
		if err != nil {
			return err
		}
		var h struct {
			Block   json.RawMessage `json:"block"`
			Deleted bool            `json:"deleted"`
		}
		if err := json.Unmarshal(value, &h); err != nil {
			return err
		}
		if !h.Deleted {
			v.Handle(id, h.Block, etcdVersion(modRev))
		}
	case strings.HasPrefix(key, calico.HostPrefix):
		node, cidr, err := calico.ParseAffinityKey(key)
		if err != nil {
			return err
		}
		var a calico.Affinity
		if err := json.Unmarshal(value, &a); err != nil {
			return err
		}
		if !a.Deleted {
			v.Affinity(node, cidr)
		}
	}
	return nil
}

// ScanPrefix pages through prefix at one revision: *rev when it is set,
// else the first page's, stored in *rev so that later scans (safe-ipam's
// records in the same etcd) read the same moment. Each page's range is a
// window of about a page (package etcdrange): etcd counts a request's
// whole range.
func ScanPrefix(ctx context.Context, cli *clientv3.Client, prefix string, page int64, rev *int64, add func(key string, value []byte, modRev int64) error) error {
	if page <= 0 {
		page = pageSize
	}
	at, err := etcdrange.Prefix(ctx, cli, prefix, page, *rev, func(resp *clientv3.GetResponse) error {
		for _, kv := range resp.Kvs {
			if err := add(string(kv.Key), kv.Value, kv.ModRevision); err != nil {
				return fmt.Errorf("%s: %w", kv.Key, err)
			}
		}
		return nil
	})
	if err == nil {
		*rev = at
	}
	return err
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
	rev, err := calico.ReadJSON(ctx, e.Client, calico.BlockKey(cidr), &raw)
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
	rev, err := calico.ReadJSON(ctx, e.Client, calico.HandleKey(id), h)
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
	return calico.NodeKnown(ctx, e.Client, name)
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
