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

// Swap implements store.Store in one Txn. Creating checks that the
// attachment is not quarantined; deleting takes the record's index entries
// and quarantines with it.
func (s *Store) Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	key, err := s.key(att)
	if err != nil {
		return nil, err
	}
	cmps := []clientv3.Cmp{revisionIs(key, prev)}
	qk := s.quarantinedKey(s.node, att)
	if prev == nil {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(qk), "=", 0))
	}
	ops := append([]clientv3.Op{clientv3.OpDelete(key)}, s.releaseOps(key, prev)...)
	var out *record.Record
	if next != nil {
		copied := *next
		copied.Attachment = att
		data, err := encode(&copied)
		if err != nil {
			return nil, err
		}
		ops, out = []clientv3.Op{clientv3.OpPut(key, data)}, &copied
		if prev != nil && prev.State != record.Committed && next.State == record.Pending {
			// An ADD taking over a stale record (after a crash) drops what
			// it owned; its delegate allocation was released first. A mark
			// over a releasing record keeps it: its DEL releases it yet.
			ops = append(ops, s.releaseOps(key, prev)...)
		}
		if next.State == record.Releasing {
			// A quarantine tied to the record since the caller read it
			// (Quarantine compares the record's revision but does not
			// change it) must be released with it: read them in the same
			// Txn, as MarkReleasing does.
			ops = append(ops, clientv3.OpGet(s.holderPrefix(att.Network, key), clientv3.WithPrefix()))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(key), clientv3.OpGet(qk, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: swapping record %s: %v", store.ErrUnavailable, att, err)
	}
	if !resp.Succeeded {
		cur := s.decodeFirst(att, resp.Responses[0].GetResponseRange().GetKvs())
		if cur == nil && prev == nil && resp.Responses[1].GetResponseRange().GetCount() > 0 {
			return nil, fmt.Errorf("%s: %w", att, store.ErrQuarantined)
		}
		return s.withQuarantines(ctx, cur, key), store.ErrConflict
	}
	if out != nil {
		out.Revision = resp.Header.Revision
		if len(resp.Responses) > 1 {
			out.Quarantined = decodeQuarantines(att.Network, resp.Responses[1].GetResponseRange().GetKvs())
		}
	}
	return out, nil
}

// Get implements store.Store: the record and its quarantines, in one Txn.
func (s *Store) Get(ctx context.Context, att record.Attachment) (*record.Record, error) {
	key, err := s.key(att)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(s.holderPrefix(att.Network, key), clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: reading record %s: %v", store.ErrUnavailable, att, err)
	}
	rec := s.decodeFirst(att, resp.Responses[0].GetResponseRange().GetKvs())
	if rec != nil {
		rec.Quarantined = decodeQuarantines(att.Network, resp.Responses[1].GetResponseRange().GetKvs())
	}
	return rec, nil
}

// MarkReleasing implements store.Store in one Txn that writes the marker
// only over an existing record, returning the record it replaced (for its
// addresses) and the quarantines tied to it; with no record, it tells
// whether the attachment is quarantined.
func (s *Store) MarkReleasing(ctx context.Context, marker *record.Record) (*record.Record, error) {
	att := marker.Attachment
	key, err := s.key(att)
	if err != nil {
		return nil, err
	}
	marker = store.Releasing(marker, marker.Updated)
	data, err := encode(marker)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpPut(key, data, clientv3.WithPrevKV()), clientv3.OpGet(s.holderPrefix(att.Network, key), clientv3.WithPrefix())).
		Else(clientv3.OpGet(s.quarantinedKey(s.node, att), clientv3.WithCountOnly())).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: marking record %s: %v", store.ErrUnavailable, att, err)
	}
	if !resp.Succeeded {
		if resp.Responses[0].GetResponseRange().GetCount() > 0 {
			return nil, fmt.Errorf("%s: %w", att, store.ErrQuarantined)
		}
		return nil, nil
	}
	marker.Revision = resp.Header.Revision
	if prev := resp.Responses[0].GetResponsePut().GetPrevKv(); prev != nil {
		if old, err := decodeStored(s.prefix, key, prev.Value, prev.ModRevision); err == nil {
			keepKnown(marker, old)
		}
	}
	marker.Quarantined = decodeQuarantines(att.Network, resp.Responses[1].GetResponseRange().GetKvs())
	return marker, nil
}

// keepKnown carries into this DEL's marker what the record it replaced
// knew: its addresses (so that forgetting drops their index entries), its
// handle (with the record it shares it with) and its pod. The record may
// be an earlier DEL's marker, which knows only what that DEL knew.
func keepKnown(marker, old *record.Record) {
	if len(old.IPs) > 0 {
		marker.IPs = old.IPs
	}
	if old.Handle != "" {
		marker.Handle, marker.SharedWith = old.Handle, old.SharedWith
	}
	if old.PodName != "" {
		marker.PodNamespace, marker.PodName, marker.PodUID = old.PodNamespace, old.PodName, old.PodUID
	}
}

// List implements store.Store: this node's records (every node's when
// the store has no node), read in pages at one revision.
func (s *Store) List(ctx context.Context, network string) ([]*record.Record, error) {
	if err := record.ValidateNetwork(network); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	recs, _, err := lister{client: s.client, prefix: s.prefix}.list(ctx, network, s.node, 0)
	return recs, err
}

// ListAt lists the records of network ("" for every network) of every
// node, with their quarantines, at revision rev (0: now), and returns the
// revision it read. A record that does not decode is an error: a reader
// that judges records (the audit) must not judge a stand-in. Nothing but
// this package knows the store's key layout.
func ListAt(ctx context.Context, client *clientv3.Client, prefix, network string, rev int64) ([]*record.Record, int64, error) {
	return lister{client: client, prefix: prefix, strict: true}.list(ctx, network, "", rev)
}

// Unchanged is the Txn comparison that rec, read by ListAt, is still the
// stored record, for a write in the same etcd that must not act on a
// record that changed.
func Unchanged(prefix string, rec *record.Record) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(Key(prefix, rec.Node, rec.Attachment)), "=", rec.Revision)
}

// lister reads records and their quarantines at one revision.
type lister struct {
	client *clientv3.Client
	prefix string
	// strict: a record that does not decode is an error, not a stand-in.
	strict bool
}

func (l lister) list(ctx context.Context, network, node string, rev int64) ([]*record.Record, int64, error) {
	root := l.prefix + "/attachments/"
	from := root
	if network != "" {
		from = Prefix(l.prefix, network)
		if node != "" {
			from += node + "/"
		}
	}
	var out []*record.Record
	byPath := map[string]*record.Record{} // <network>/<node>/<cid>/<ifname>
	end := clientv3.GetPrefixRangeEnd(from)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := l.client.Get(ctx, from, opts...)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: listing records of %s: %v", store.ErrUnavailable, orAll(network), err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			path := strings.TrimPrefix(string(kv.Key), root)
			rec, err := l.decode(string(kv.Key), strings.SplitN(path, "/", 2)[0], kv.Value, kv.ModRevision)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, rec)
			byPath[path] = rec
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, rev, l.listQuarantines(ctx, network, byPath, rev)
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (l lister) decode(key, network string, value []byte, rev int64) (*record.Record, error) {
	if !l.strict {
		return decodeAt(l.prefix, key, network, value, rev), nil
	}
	rec, err := decodeStored(l.prefix, key, value, rev)
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", key, err)
	}
	return rec, nil
}

// listQuarantines attaches the quarantines to their holders, read at the
// revision of the listing. Keys:
// <prefix>/quarantine/<network>/holder/<node>/<cid>/<ifname>/<node>/<cid>/<ifname>.
func (l lister) listQuarantines(ctx context.Context, network string, byPath map[string]*record.Record, rev int64) error {
	root := l.prefix + "/quarantine/"
	from := root
	if network != "" {
		from += network + "/holder/"
	}
	resp, err := l.client.Get(ctx, from, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return fmt.Errorf("%w: listing quarantines of %s: %v", store.ErrUnavailable, orAll(network), err)
	}
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), root), "/")
		if len(parts) != 8 || parts[1] != "holder" { // the attachment-side key of a quarantine
			continue
		}
		if rec := byPath[parts[0]+"/"+strings.Join(parts[2:5], "/")]; rec != nil {
			rec.Quarantined = append(rec.Quarantined, decodeQuarantines(parts[0], []*mvccpb.KeyValue{kv})...)
		}
	}
	return nil
}

func orAll(network string) string {
	if network == "" {
		return "every network"
	}
	return network
}

// listPage bounds one List read.
const listPage = 1000

// decodeAt decodes a record, or stands in for one that does not decode
// or is not what its key names, so that DEL, GC and ADD can still release
// and replace it (as the attachment its key names).
func decodeAt(prefix, key, network string, value []byte, rev int64) *record.Record {
	rec, err := decodeStored(prefix, key, value, rev)
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

// decodeStored decodes the record at key and checks it against what the
// key names: whoever can write the store could otherwise make DEL and GC
// release any handle.
func decodeStored(prefix, key string, value []byte, rev int64) (*record.Record, error) {
	rec, err := Decode(value, rev)
	if err != nil {
		return nil, err
	}
	att, node, ok := keyAttachment(prefix, key)
	if !ok {
		return nil, fmt.Errorf("key %s is not a record's", key)
	}
	if err := rec.CheckStored(att, node); err != nil {
		return nil, err
	}
	return rec, nil
}

// keyAttachment reads the attachment and node a record's key names.
func keyAttachment(prefix, key string) (record.Attachment, string, bool) {
	parts := strings.Split(strings.TrimPrefix(key, prefix+"/attachments/"), "/")
	if len(parts) != 4 || !strings.HasPrefix(key, prefix+"/attachments/") {
		return record.Attachment{}, "", false
	}
	return record.Attachment{Network: parts[0], ContainerID: parts[2], IfName: parts[3]}, parts[1], true
}

func (s *Store) decodeFirst(att record.Attachment, kvs []*mvccpb.KeyValue) *record.Record {
	if len(kvs) == 0 {
		return nil
	}
	rec, err := decodeStored(s.prefix, string(kvs[0].Key), kvs[0].Value, kvs[0].ModRevision)
	if err != nil {
		return store.Damaged(att, kvs[0].ModRevision)
	}
	return rec
}

// ForNode implements store.Cluster: another node's records on the same
// client.
func (s *Store) ForNode(node string) store.Store {
	return &Store{client: s.client, prefix: s.prefix, node: node, timeout: s.timeout}
}

// ListEveryNode lists the records of network on every node, with their
// quarantines, at one revision.
func (s *Store) ListEveryNode(ctx context.Context, network string) ([]*record.Record, error) {
	if err := record.ValidateNetwork(network); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	recs, _, err := lister{client: s.client, prefix: s.prefix}.list(ctx, network, "", 0)
	return recs, err
}
