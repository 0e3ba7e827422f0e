// Package etcdstore keeps records in etcd, one key per attachment and
// node, beside a cluster-wide address index and the quarantines. Every
// write is one Txn that compares the key's revision with what the caller
// last saw. keys.go holds the key layout, codec.go the values; this file
// holds the Txns in the order an ADD and a DEL use them, list.go the
// listings.
package etcdstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Config says how to reach etcd.
type Config struct {
	Endpoints   []string
	Prefix      string
	Node        string // whose records this store reads and writes
	TLS         etcdtls.Files
	DialTimeout time.Duration
}

// Store is the etcd store.
type Store struct {
	client  *clientv3.Client
	prefix  string
	node    string
	timeout time.Duration
	leads   *leads
}

var _ store.Cluster = (*Store)(nil)

// Open connects to etcd and waits until the connection is up, so an
// unreachable store is found before anything is changed, without spending
// a request on it. Errors wrap store.ErrUnavailable and name the TLS file
// at fault, if one is.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	client, err := etcdconn.Connect(ctx, etcdconn.Config{Endpoints: cfg.Endpoints, TLS: cfg.TLS, DialTimeout: cfg.DialTimeout})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return &Store{client: client, prefix: cfg.Prefix, node: cfg.Node, timeout: cfg.DialTimeout, leads: &leads{}}, nil
}

// NewWithClient wraps an existing client, for tests. Node "" gives a
// store that lists every node's records and writes none.
func NewWithClient(client *clientv3.Client, prefix, node string, timeout time.Duration) *Store {
	return &Store{client: client, prefix: prefix, node: node, timeout: timeout, leads: &leads{}}
}

// The Txns follow an ADD (Swap writes the pending record, Commit claims
// its addresses, Quarantine when one is held) and then a DEL
// (MarkReleasing, Unquarantine, Swap deletes); Get and what they share
// come last.

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
			// The quarantines tied to the record are released with it:
			// read them in the same Txn, as MarkReleasing does.
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

// Commit implements store.Store: one Txn writes the record and claims its
// addresses, so the check costs no round trip. Only a conflict reads more.
func (s *Store) Commit(ctx context.Context, pending, committed *record.Record) (*record.Record, error) {
	att := committed.Attachment
	key, err := s.key(att)
	if err != nil {
		return nil, err
	}
	data, err := encode(committed)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	takeover := map[string][]clientv3.Cmp{} // index key -> the entry and holder states it takes over
	for attempt := 0; attempt < 4; attempt++ {
		cmps := []clientv3.Cmp{revisionIs(key, pending)}
		ops := []clientv3.Op{clientv3.OpPut(key, data)}
		var gets []clientv3.Op
		for _, ip := range committed.IPs {
			ik := AddressKey(s.prefix, att.Network, ip)
			if c, ok := takeover[ik]; ok {
				cmps = append(cmps, c...)
			} else {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(ik), "=", 0))
			}
			ops = append(ops, clientv3.OpPut(ik, key))
			gets = append(gets, clientv3.OpGet(ik))
		}
		resp, err := s.client.Txn(ctx).If(cmps...).Then(ops...).Else(append([]clientv3.Op{clientv3.OpGet(key)}, gets...)...).Commit()
		if err != nil {
			return nil, fmt.Errorf("%w: committing record %s: %v", store.ErrUnavailable, att, err)
		}
		if resp.Succeeded {
			out := *committed
			out.Revision = resp.Header.Revision
			return &out, nil
		}
		cur := resp.Responses[0].GetResponseRange().GetKvs()
		if !sameRevision(cur, pending) {
			return s.withQuarantines(ctx, s.decodeFirst(att, cur), key), store.ErrConflict
		}
		if err := s.judgeHolders(ctx, key, committed, resp.Responses[1:], takeover); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: committing record %s: the address index kept changing", store.ErrConflict, att)
}

// judgeHolders reads the holders of the index entries that stopped a
// commit. A committed holder is a *HeldError, unless the committing record
// takes its entries over (record.TakesOver: both hold a shared handle's
// addresses). An entry whose holder record is gone, is being released, or
// is the committing record itself may be taken over, if the entry and the
// holder do not change meanwhile.
func (s *Store) judgeHolders(ctx context.Context, key string, committed *record.Record, gets []*etcdserverpb.ResponseOp, takeover map[string][]clientv3.Cmp) error {
	network, ips := committed.Network, committed.IPs
	for i, g := range gets {
		kvs := g.GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			// Gone since: claim it as absent again, not as it was.
			delete(takeover, AddressKey(s.prefix, network, ips[i]))
			continue
		}
		ik, holderKey := string(kvs[0].Key), string(kvs[0].Value)
		entry := clientv3.Compare(clientv3.ModRevision(ik), "=", kvs[0].ModRevision)
		if holderKey == key {
			takeover[ik] = []clientv3.Cmp{entry}
			continue
		}
		resp, err := s.client.Get(ctx, holderKey)
		if err != nil {
			return fmt.Errorf("%w: reading the holder of %s: %v", store.ErrUnavailable, ips[i], err)
		}
		if len(resp.Kvs) == 0 {
			takeover[ik] = []clientv3.Cmp{entry, clientv3.Compare(clientv3.CreateRevision(holderKey), "=", 0)}
			continue
		}
		holder, err := decodeStored(s.prefix, holderKey, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
		if err == nil && holder.State == record.Committed && !committed.TakesOver(holder) {
			return &store.HeldError{Addr: ips[i], Holder: holder}
		}
		takeover[ik] = []clientv3.Cmp{entry, clientv3.Compare(clientv3.ModRevision(holderKey), "=", resp.Kvs[0].ModRevision)}
	}
	return nil
}

// Quarantine implements store.Store in one Txn. It writes the holder's
// record over itself (its value as it is), so the holder's revision
// changes: whoever read the holder before, without the quarantine, and
// deletes it by compare-and-swap (uninstall's forget, a GC) conflicts,
// instead of dropping the quarantine's holder side and stranding its mark.
func (s *Store) Quarantine(ctx context.Context, pending, holder *record.Record, q record.Quarantine) error {
	key, err := s.key(pending.Attachment)
	if err != nil {
		return err
	}
	if err := record.ValidateNode(holder.Node); err != nil {
		return fmt.Errorf("holder %s: %w", holder.Attachment, err)
	}
	q.Node = s.node
	data, err := encodeQuarantine(q)
	if err != nil {
		return err
	}
	hk := RecordKey(s.prefix, holder.Node, holder.Attachment)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(revisionIs(key, pending), clientv3.Compare(clientv3.ModRevision(hk), "=", holder.Revision)).
		Then(clientv3.OpDelete(key),
			// chaos:quarantine-keeps-holder-revision (a mutant breaks what follows)
			clientv3.OpPut(hk, "", clientv3.WithIgnoreValue()),
			clientv3.OpPut(s.tiedKey(holder.Network, hk, q), data),
			clientv3.OpPut(s.quarantinedKey(s.node, q.Attachment), hk)).Commit()
	if err != nil {
		return fmt.Errorf("%w: quarantining %s for %s: %v", store.ErrUnavailable, q.Attachment, holder.Attachment, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: quarantining %s for %s", store.ErrConflict, q.Attachment, holder.Attachment)
	}
	return nil
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

// quarantinesPerTxn bounds the quarantines one Txn forgets: two
// operations each, well under etcd's default limit of 128 per Txn.
const quarantinesPerTxn = 50

// Unquarantine implements store.Store, in Txns of quarantinesPerTxn
// quarantines that each compare the holder's revision (forgetting a
// quarantine does not change it).
func (s *Store) Unquarantine(ctx context.Context, holder *record.Record, qs []record.Quarantine) (*record.Record, error) {
	key, err := s.key(holder.Attachment)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for batch := range slices.Chunk(qs, quarantinesPerTxn) {
		var ops []clientv3.Op
		for _, q := range batch {
			ops = append(ops, clientv3.OpDelete(s.tiedKey(holder.Network, key, q)),
				clientv3.OpDelete(s.quarantinedKey(q.Node, q.Attachment)))
		}
		resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", holder.Revision)).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("%w: forgetting quarantines of %s: %v", store.ErrUnavailable, holder.Attachment, err)
		}
		if !resp.Succeeded {
			return nil, fmt.Errorf("%w: forgetting quarantines of %s", store.ErrConflict, holder.Attachment)
		}
	}
	out := *holder
	out.Quarantined = store.Without(holder.Quarantined, qs)
	return &out, nil
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

// Holder implements store.Cluster: the index entry's value is the
// holder's key, which names its node and attachment.
func (s *Store) Holder(ctx context.Context, network, addr string) (*store.Holding, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Get(ctx, AddressKey(s.prefix, network, addr))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the holder of %s: %v", store.ErrUnavailable, addr, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	att, node, ok := parseRecordKey(s.prefix, string(resp.Kvs[0].Value))
	if !ok {
		return nil, fmt.Errorf("the index entry of %s names %q, not a record", addr, resp.Kvs[0].Value)
	}
	return &store.Holding{Node: node, Attachment: att}, nil
}

// releaseOps delete what a deleted record owned: its index entries (only
// those still naming it) and the quarantines tied to it.
func (s *Store) releaseOps(key string, rec *record.Record) []clientv3.Op {
	var ops []clientv3.Op
	if rec == nil {
		return nil
	}
	for _, ip := range rec.IPs {
		ik := AddressKey(s.prefix, rec.Network, ip)
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(ik), "=", key)}, []clientv3.Op{clientv3.OpDelete(ik)}, nil))
	}
	ops = append(ops, clientv3.OpDelete(s.holderPrefix(rec.Network, key), clientv3.WithPrefix()))
	for _, q := range rec.Quarantined {
		ops = append(ops, clientv3.OpDelete(s.quarantinedKey(q.Node, q.Attachment)))
	}
	return ops
}

// withQuarantines fills in the quarantines tied to rec (one read).
func (s *Store) withQuarantines(ctx context.Context, rec *record.Record, key string) *record.Record {
	if rec == nil {
		return nil
	}
	resp, err := s.client.Get(ctx, s.holderPrefix(rec.Network, key), clientv3.WithPrefix())
	if err == nil {
		rec.Quarantined = decodeQuarantines(rec.Network, resp.Kvs)
	}
	return rec
}

// revisionIs compares key with prev's revision (nil: no record).
func revisionIs(key string, prev *record.Record) clientv3.Cmp {
	if prev == nil {
		return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", prev.Revision)
}

func sameRevision(kvs []*mvccpb.KeyValue, prev *record.Record) bool {
	if prev == nil {
		return len(kvs) == 0
	}
	return len(kvs) == 1 && kvs[0].ModRevision == prev.Revision
}

// Ping implements store.Store with a cheap read.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.client.Get(ctx, storePrefix(s.prefix), clientv3.WithCountOnly(), clientv3.WithLimit(1)); err != nil {
		return fmt.Errorf("%w: etcd at %v: %v", store.ErrUnavailable, s.client.Endpoints(), err)
	}
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.resign()
	return s.client.Close()
}
