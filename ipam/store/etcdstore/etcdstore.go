// Package etcdstore keeps records in etcd under
// <prefix>/attachments/<network>/<node>/<containerID>/<ifname>. Every
// write is one Txn that compares the key's revision with what the caller
// last saw. The node in the key lets a node list only its own records:
// every node of a cluster shares the store when it is Calico's etcd.
package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// Config says how to reach etcd.
type Config struct {
	Endpoints   []string
	Prefix      string
	Node        string // whose records this store reads and writes
	TLS         etcdconn.TLSFiles
	DialTimeout time.Duration
}

// Store is the etcd store.
type Store struct {
	client  *clientv3.Client
	prefix  string
	node    string
	timeout time.Duration
}

var _ store.Store = (*Store)(nil)

// Open connects to etcd and waits until the connection is up, so an
// unreachable store is found before anything is changed, without spending
// a request on it. Errors wrap store.ErrUnavailable and name the TLS file
// at fault, if one is.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	client, err := etcdconn.Connect(ctx, etcdconn.Config{Endpoints: cfg.Endpoints, TLS: cfg.TLS, DialTimeout: cfg.DialTimeout})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return &Store{client: client, prefix: cfg.Prefix, node: cfg.Node, timeout: cfg.DialTimeout}, nil
}

// NewWithClient wraps an existing client, for tests. Node "" gives a
// store that lists every node's records and writes none.
func NewWithClient(client *clientv3.Client, prefix, node string, timeout time.Duration) *Store {
	return &Store{client: client, prefix: prefix, node: node, timeout: timeout}
}

// Prefix returns the key prefix of a network's records on every node,
// ending in "/".
func Prefix(prefix, network string) string {
	return prefix + "/attachments/" + network + "/"
}

// Key is the key of the record of att written on node.
func Key(prefix, node string, att record.Attachment) string {
	return Prefix(prefix, att.Network) + node + "/" + att.ContainerID + "/" + att.IfName
}

// key validates att and this store's node, which name the key.
func (s *Store) key(att record.Attachment) (string, error) {
	if err := att.Validate(); err != nil {
		return "", err
	}
	if err := record.ValidateNode(s.node); err != nil {
		return "", err
	}
	return Key(s.prefix, s.node, att), nil
}

// Swap implements store.Store in one Txn.
func (s *Store) Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	key, err := s.key(att)
	if err != nil {
		return nil, err
	}
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	if prev != nil {
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", prev.Revision)
	}
	op := clientv3.OpDelete(key)
	var out *record.Record
	if next != nil {
		copied := *next
		copied.Attachment = att
		data, err := json.Marshal(&copied)
		if err != nil {
			return nil, fmt.Errorf("encoding record %s: %w", att, err)
		}
		op, out = clientv3.OpPut(key, string(data)), &copied
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(cmp).Then(op).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: swapping record %s: %v", store.ErrUnavailable, att, err)
	}
	if !resp.Succeeded {
		return decodeFirst(att, resp.Responses[0].GetResponseRange().GetKvs()), store.ErrConflict
	}
	if out != nil {
		out.Revision = resp.Header.Revision
	}
	return out, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, att record.Attachment) (*record.Record, error) {
	key, err := s.key(att)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("%w: reading record %s: %v", store.ErrUnavailable, att, err)
	}
	return decodeFirst(att, resp.Kvs), nil
}

// MarkReleasing implements store.Store in one Txn that writes the marker
// only over an existing record. Without a read it cannot keep the fields.
func (s *Store) MarkReleasing(ctx context.Context, marker *record.Record) (*record.Record, error) {
	att := marker.Attachment
	key, err := s.key(att)
	if err != nil {
		return nil, err
	}
	marker = store.Releasing(marker, marker.Updated)
	data, err := json.Marshal(marker)
	if err != nil {
		return nil, fmt.Errorf("encoding record %s: %w", att, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpPut(key, string(data))).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: marking record %s: %v", store.ErrUnavailable, att, err)
	}
	if !resp.Succeeded {
		return nil, nil
	}
	marker.Revision = resp.Header.Revision
	return marker, nil
}

// List implements store.Store: this node's records (every node's when
// the store has no node), read in pages at one revision.
func (s *Store) List(ctx context.Context, network string) ([]*record.Record, error) {
	if err := record.ValidateNetwork(network); err != nil {
		return nil, err
	}
	prefix := Prefix(s.prefix, network)
	if s.node != "" {
		prefix += s.node + "/"
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var out []*record.Record
	end, from, rev := clientv3.GetPrefixRangeEnd(prefix), prefix, int64(0)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.client.Get(ctx, from, opts...)
		if err != nil {
			return nil, fmt.Errorf("%w: listing records of %s: %v", store.ErrUnavailable, network, err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			out = append(out, decodeAt(string(kv.Key), network, kv.Value, kv.ModRevision))
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// listPage bounds one List read.
const listPage = 1000

// decodeAt decodes a record, or stands in for one that does not decode so
// that DEL, GC and ADD can still release and replace it.
func decodeAt(key, network string, value []byte, rev int64) *record.Record {
	rec, err := Decode(value, rev)
	if err == nil {
		return rec
	}
	parts := strings.Split(key, "/")
	att := record.Attachment{Network: network}
	if len(parts) >= 2 {
		att.ContainerID, att.IfName = parts[len(parts)-2], parts[len(parts)-1]
	}
	return store.Damaged(att, rev)
}

// Ping implements store.Store with a cheap read.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly(), clientv3.WithLimit(1)); err != nil {
		return fmt.Errorf("%w: etcd at %v: %v", store.ErrUnavailable, s.client.Endpoints(), err)
	}
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error { return s.client.Close() }

// Decode reads a stored record value.
func Decode(value []byte, revision int64) (*record.Record, error) {
	var rec record.Record
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, fmt.Errorf("decoding record: %w", err)
	}
	rec.Revision = revision
	return &rec, nil
}

func decodeFirst(att record.Attachment, kvs []*mvccpb.KeyValue) *record.Record {
	if len(kvs) == 0 {
		return nil
	}
	rec, err := Decode(kvs[0].Value, kvs[0].ModRevision)
	if err != nil {
		return store.Damaged(att, kvs[0].ModRevision)
	}
	return rec
}
