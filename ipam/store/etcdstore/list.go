package etcdstore

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// List implements store.Store: this node's records (every node's when
// the store has no node), read in pages at one revision.
func (s *Store) List(ctx context.Context, network string) ([]*record.Record, error) {
	return s.listOf(ctx, network, s.node)
}

// ListEveryNode implements store.Cluster: the records of network on every
// node, with their quarantines, at one revision.
func (s *Store) ListEveryNode(ctx context.Context, network string) ([]*record.Record, error) {
	return s.listOf(ctx, network, "")
}

func (s *Store) listOf(ctx context.Context, network, node string) ([]*record.Record, error) {
	if err := record.ValidateNetwork(network); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	recs, _, err := lister{client: s.client, prefix: s.prefix}.list(ctx, network, node, 0)
	return recs, err
}

// ForNode implements store.Cluster: another node's records on the same
// client.
func (s *Store) ForNode(node string) store.Store {
	return &Store{client: s.client, prefix: s.prefix, node: node, timeout: s.timeout, leads: s.leads}
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
	return clientv3.Compare(clientv3.ModRevision(RecordKey(prefix, rec.Node, rec.Attachment)), "=", rec.Revision)
}

// lister reads records and their quarantines at one revision.
type lister struct {
	client *clientv3.Client
	prefix string
	// strict: a record that does not decode is an error, not a stand-in.
	strict bool
}

func (l lister) list(ctx context.Context, network, node string, rev int64) ([]*record.Record, int64, error) {
	from := listPrefix(l.prefix, network, node)
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
			path, of := recordPath(l.prefix, string(kv.Key))
			rec, err := l.decode(string(kv.Key), of, kv.Value, kv.ModRevision)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, rec)
			byPath[path] = rec
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, rev, l.listQuarantines(ctx, network, node, byPath, rev)
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
// revision of the listing: those of node's holders alone when the listing
// is of one node, so a node's gc reads nothing of other nodes.
func (l lister) listQuarantines(ctx context.Context, network, node string, byPath map[string]*record.Record, rev int64) error {
	resp, err := l.client.Get(ctx, tiedPrefix(l.prefix, network, node), clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return fmt.Errorf("%w: listing quarantines of %s: %v", store.ErrUnavailable, orAll(network), err)
	}
	for _, kv := range resp.Kvs {
		of, holderPath, ok := parseTiedKey(l.prefix, string(kv.Key))
		if !ok { // the attachment-side key of a quarantine
			continue
		}
		if rec := byPath[holderPath]; rec != nil {
			rec.Quarantined = append(rec.Quarantined, decodeQuarantines(of, []*mvccpb.KeyValue{kv})...)
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
