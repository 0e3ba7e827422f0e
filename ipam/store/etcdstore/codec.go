package etcdstore

import (
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// The values under the keys of keys.go: a record and a quarantine are
// JSON; an address index entry and the attachment-side key of a
// quarantine hold the key of the record that holds them, as it is.

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

// decode reads a stored record value.
func decode(value []byte, revision int64) (*record.Record, error) {
	var rec record.Record
	if err := record.Decode(value, &rec); err != nil {
		return nil, fmt.Errorf("decoding record: %w", err)
	}
	rec.Revision = revision
	return &rec, nil
}

// decodeStored decodes the record at key and checks it against what the
// key names: whoever can write the store could otherwise make DEL and GC
// release any handle.
func decodeStored(prefix, key string, value []byte, rev int64) (*record.Record, error) {
	rec, err := decode(value, rev)
	if err != nil {
		return nil, err
	}
	att, node, ok := parseRecordKey(prefix, key)
	if !ok {
		return nil, fmt.Errorf("key %s is not a record's", key)
	}
	if err := rec.CheckStored(att, node); err != nil {
		return nil, err
	}
	return rec, nil
}

// decodeAt decodes a record, or stands in for one that does not decode
// or is not what its key names, so that DEL, GC and ADD can still release
// and replace it (as the attachment its key names).
func decodeAt(prefix, key, network string, value []byte, rev int64) *record.Record {
	rec, err := decodeStored(prefix, key, value, rev)
	if err == nil {
		return rec
	}
	return store.Damaged(namedAttachment(key, network), rev)
}

// decodeFirst decodes the record of att a read returned, if any, or
// stands in for it.
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

// encodeQuarantine writes q, which names its node, under its holder.
func encodeQuarantine(q record.Quarantine) (string, error) {
	data, err := json.Marshal(q)
	if err != nil {
		return "", fmt.Errorf("encoding quarantine of %s: %w", q.Attachment, err)
	}
	return string(data), nil
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
		if json.Unmarshal(kv.Value, &q) != nil || q.Node == "" || q.Check(network) != nil || !namesQuarantine(string(kv.Key), q) {
			continue
		}
		out = append(out, q)
	}
	return out
}
