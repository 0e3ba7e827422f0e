package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// The address index and the quarantines live beside the records:
//
//	<prefix>/addresses/<network>/<address>          -> key of the holder's record
//	<prefix>/quarantine/<network>/holder/<holder record path>/<node>/<cid>/<ifname> -> the Quarantine
//	<prefix>/quarantine/<network>/attachment/<node>/<cid>/<ifname>                 -> key of the holder's record
//
// The index is cluster-wide, as Calico's addresses are. A quarantine has
// two keys: one its holder's DEL lists in the Txn that marks it, one the
// quarantined attachment's DEL and ADD check in theirs.

// AddressKey is the index key of addr ("10.0.0.1" or "10.0.0.1/26") in network.
func AddressKey(prefix, network, addr string) string {
	if a, ok := record.ParseAddr(addr); ok {
		addr = a.String()
	}
	return prefix + "/addresses/" + network + "/" + addr
}

// holderPrefix lists the quarantines tied to the record at key
// (<records of network>/<node>/<cid>/<ifname>).
func (s *Store) holderPrefix(network, key string) string {
	return s.prefix + "/quarantine/" + network + "/holder/" + strings.TrimPrefix(key, Prefix(s.prefix, network)) + "/"
}

// quarantinedKey marks att of node as quarantined.
func (s *Store) quarantinedKey(node string, att record.Attachment) string {
	return s.prefix + "/quarantine/" + att.Network + "/attachment/" + node + "/" + att.ContainerID + "/" + att.IfName
}

func holderKeyOf(prefix string, holder *record.Record) string {
	return Key(prefix, holder.Node, holder.Attachment)
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

// Quarantine implements store.Store in one Txn.
func (s *Store) Quarantine(ctx context.Context, pending, holder *record.Record, q record.Quarantine) error {
	key, err := s.key(pending.Attachment)
	if err != nil {
		return err
	}
	if err := record.ValidateNode(holder.Node); err != nil {
		return fmt.Errorf("holder %s: %w", holder.Attachment, err)
	}
	q.Node = s.node
	data, err := json.Marshal(q)
	if err != nil {
		return fmt.Errorf("encoding quarantine of %s: %w", q.Attachment, err)
	}
	hk := holderKeyOf(s.prefix, holder)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(revisionIs(key, pending), clientv3.Compare(clientv3.ModRevision(hk), "=", holder.Revision)).
		Then(clientv3.OpDelete(key),
			clientv3.OpPut(s.holderPrefix(holder.Network, hk)+s.node+"/"+q.ContainerID+"/"+q.IfName, string(data)),
			clientv3.OpPut(s.quarantinedKey(s.node, q.Attachment), hk)).Commit()
	if err != nil {
		return fmt.Errorf("%w: quarantining %s for %s: %v", store.ErrUnavailable, q.Attachment, holder.Attachment, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: quarantining %s for %s", store.ErrConflict, q.Attachment, holder.Attachment)
	}
	return nil
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
			ops = append(ops, clientv3.OpDelete(s.holderPrefix(holder.Network, key)+q.Node+"/"+q.ContainerID+"/"+q.IfName),
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

// decodeQuarantines reads the quarantines tied to a holder on network.
// Releasing one is a delegate DEL of the attachment it names, so an entry
// that is not one safe-ipam could have written there (under the key that
// names its node and attachment) is left out: it is never acted on, and
// goes with its holder's keys.
func decodeQuarantines(network string, kvs []*mvccpb.KeyValue) []record.Quarantine {
	var out []record.Quarantine
	for _, kv := range kvs {
		var q record.Quarantine
		if json.Unmarshal(kv.Value, &q) != nil || q.Node == "" || q.Check(network) != nil ||
			!strings.HasSuffix(string(kv.Key), "/"+q.Node+"/"+q.ContainerID+"/"+q.IfName) {
			continue
		}
		out = append(out, q)
	}
	return out
}

// encode writes a record without its quarantines, which have keys of
// their own.
func encode(rec *record.Record) (string, error) {
	copied := *rec
	copied.Quarantined = nil
	data, err := json.Marshal(&copied)
	if err != nil {
		return "", fmt.Errorf("encoding record %s: %w", rec.Attachment, err)
	}
	return string(data), nil
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
