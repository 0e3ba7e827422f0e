package etcdstore

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/etcdrange"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
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
// this package knows the store's key layout. keep, when set, is given
// each record as it is decoded: a reader of a million records shares
// their repeated strings there, before the next page adds more.
func ListAt(ctx context.Context, client *clientv3.Client, prefix, network string, rev int64, keep func(*record.Record)) ([]*record.Record, int64, error) {
	return lister{client: client, prefix: prefix, strict: true, keep: keep}.list(ctx, network, "", rev)
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
	keep   func(*record.Record)
}

func (l lister) list(ctx context.Context, network, node string, rev int64) ([]*record.Record, int64, error) {
	from := listPrefix(l.prefix, network, node)
	var out []*record.Record
	byPath := map[string]*record.Record{} // <network>/<node>/<cid>/<ifname>
	var quarantines []*mvccpb.KeyValue
	// The first page and the quarantines in one round trip, at one
	// revision: a node's list is then one request, as gc and doctor make
	// it on every node. Later pages are windows of the range (etcdrange).
	opening := true
	get := func(ctx context.Context, from, to string, limit, at int64) (*clientv3.GetResponse, error) {
		if !opening {
			return l.client.Get(ctx, from, etcdrange.Options(to, limit, at)...)
		}
		opening = false
		tied, err := l.firstPage(ctx, from, to, network, node, at)
		quarantines = tied.quarantines
		return tied.page, err
	}
	// Each page is decoded on every CPU while the one before is kept, in
	// key order.
	each, flush := etcdrange.Pipeline(l.decodeKV, func(d decoded) error {
		if d.err != nil {
			return d.err
		}
		if l.keep != nil {
			l.keep(d.rec)
		}
		out = append(out, d.rec)
		if len(quarantines) > 0 { // the index holds every key: only when needed
			byPath[d.path] = d.rec
		}
		return nil
	})
	rev, err := etcdrange.Scan(ctx, get, from, clientv3.GetPrefixRangeEnd(from), listPage, rev, each)
	err = scanError(err, flush)
	if err != nil {
		if errors.As(err, new(decodeError)) {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("%w: listing records of %s: %v", store.ErrUnavailable, orAll(network), err)
	}
	l.attachQuarantines(quarantines, byPath)
	return out, rev, nil
}

// scanError is a listing's error once its Scan returned err: flush's
// when the Scan read everything; when a read failed, the page before it,
// decoded but not kept yet, may hold a record that does not decode,
// which is said as such (as when each page was kept before the next was
// read).
func scanError(err error, flush func() error) error {
	switch {
	case err == nil:
		return flush()
	case !errors.As(err, new(decodeError)):
		if ferr := flush(); errors.As(ferr, new(decodeError)) {
			return ferr
		}
	}
	return err
}

// first is a listing's first page of records and the quarantines, read
// together.
type first struct {
	page        *clientv3.GetResponse
	quarantines []*mvccpb.KeyValue
}

func (l lister) firstPage(ctx context.Context, from, to, network, node string, rev int64) (first, error) {
	tiedOpts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev != 0 {
		tiedOpts = append(tiedOpts, clientv3.WithRev(rev))
	}
	resp, err := l.client.Txn(ctx).Then(clientv3.OpGet(from, etcdrange.Options(to, listPage, rev)...), clientv3.OpGet(tiedPrefix(l.prefix, network, node), tiedOpts...)).Commit()
	if err != nil {
		return first{}, err
	}
	page := (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())
	page.Header = resp.Header // the Txn's: its revision is the listing's
	return first{page: page, quarantines: resp.Responses[1].GetResponseRange().GetKvs()}, nil
}

// decoded is one record of a listing's page.
type decoded struct {
	path string
	rec  *record.Record
	err  error
}

func (l lister) decodeKV(kv *mvccpb.KeyValue) decoded {
	key := string(kv.Key)
	path, of := recordPath(l.prefix, key)
	rec, err := l.decode(key, of, kv.Value, kv.ModRevision)
	return decoded{path, rec, err}
}

func (l lister) decode(key, network string, value []byte, rev int64) (*record.Record, error) {
	if !l.strict {
		return decodeAt(l.prefix, key, network, value, rev), nil
	}
	rec, err := decodeStored(l.prefix, key, value, rev)
	if err != nil {
		return nil, decodeError{fmt.Errorf("record %s: %w", key, err)}
	}
	return rec, nil
}

// attachQuarantines attaches the quarantines, read with the listing (those
// of node's holders alone when the listing is of one node, so a node's gc
// reads nothing of other nodes), to their holders.
func (l lister) attachQuarantines(kvs []*mvccpb.KeyValue, byPath map[string]*record.Record) {
	for _, kv := range kvs {
		of, holderPath, ok := parseTiedKey(l.prefix, string(kv.Key))
		if !ok { // the attachment-side key of a quarantine
			continue
		}
		if rec := byPath[holderPath]; rec != nil {
			rec.Quarantined = append(rec.Quarantined, decodeQuarantines(of, []*mvccpb.KeyValue{kv})...)
		}
	}
}

func orAll(network string) string {
	if network == "" {
		return "every network"
	}
	return network
}

// decodeError is a record a strict listing could not decode: not an
// unavailable store.
type decodeError struct{ error }

func (e decodeError) Unwrap() error { return e.error }

// listPage bounds one List read.
const listPage = 1000
