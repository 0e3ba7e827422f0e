package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// RemoteMark is an allocation the node keeps quarantined for a holder
// its store cannot read (another node's record, known by its
// cluster-wide claim): no record names it, yet it is held. Mark is nil
// when the mark does not decode (it fences all the same).
type RemoteMark struct {
	Attachment record.Attachment
	Mark       *record.RemoteQuarantine
}

// markedStore is a store that keeps such marks (the file store, beside
// the cluster-wide claims).
type markedStore interface {
	QuarantineMarks(ctx context.Context, network string) (map[record.Attachment]*record.RemoteQuarantine, error)
}

// Records is where the audit reads safe-ipam's records.
type Records interface {
	// Load returns the records of network ("" for every network, where
	// the store can list them), read at p when the store can, each given
	// to keep (when set) as it is read.
	Load(ctx context.Context, network string, p datastore.Point, keep func(*record.Record)) ([]*record.Record, error)
	// Recheck fails unless rec is still the record the audit read: a DEL
	// marks it first, and re-claiming for a pod being deleted would leak.
	Recheck(ctx context.Context, rec *record.Record) error
	// Node is the one node whose records this store holds ("" for all).
	Node() string
	// Shared says the store holds more than one machine's records (etcd,
	// keyed by Calico node name, which machines may share), even when read
	// for one node.
	Shared() bool
	// Forget removes rec, with its address index entries and
	// quarantines, if it is still the record the audit read (else
	// ErrStale).
	Forget(ctx context.Context, rec *record.Record) error
}

// EtcdRecords are the records of safe-ipam's etcd store under Prefix.
// When Client is also Calico's etcd, they are read at the scan's revision
// and a re-claim compares its record in the same Txn.
type EtcdRecords struct {
	Client *clientv3.Client
	Prefix string
}

// Node implements Records: the etcd store holds every node's records.
func (e *EtcdRecords) Node() string { return "" }

// Shared implements Records.
func (e *EtcdRecords) Shared() bool { return true }

// Load implements Records, at p.Revision when it is set.
func (e *EtcdRecords) Load(ctx context.Context, network string, p datastore.Point, keep func(*record.Record)) ([]*record.Record, error) {
	recs, _, err := etcdstore.ListAt(ctx, e.Client, e.Prefix, network, p.Revision, keep)
	if err != nil {
		return nil, fmt.Errorf("reading safe-ipam records: %w", err)
	}
	return recs, nil
}

// Recheck implements Records.
func (e *EtcdRecords) Recheck(ctx context.Context, rec *record.Record) error {
	resp, err := e.Client.Get(ctx, e.key(rec))
	switch {
	case err != nil:
		return fmt.Errorf("re-reading record %s: %w", rec.Attachment, err)
	case len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != rec.Revision:
		return fmt.Errorf("%w: record %s changed since the audit", ErrStale, rec.Attachment)
	}
	return nil
}

// Compare is the Txn comparison that rec is unchanged, for a write in the
// same etcd.
func (e *EtcdRecords) Compare(rec *record.Record) clientv3.Cmp {
	return etcdstore.Unchanged(e.Prefix, rec)
}

func (e *EtcdRecords) key(rec *record.Record) string {
	return etcdstore.RecordKey(e.Prefix, rec.Node, rec.Attachment)
}

// StoreRecords are records read through a store.Store: the node's file
// store, or an etcd store apart from Calico's datastore. It cannot be
// read at the scan's point, so repair re-checks a record just before it
// writes (Recheck).
type StoreRecords struct {
	Store store.Store
	// Of is the one node whose records the store holds ("" for all).
	Of string
	// Where names the store in messages, e.g. "file store /var/lib/cni/safe-ipam".
	Where string
}

// Node implements Records.
func (s *StoreRecords) Node() string { return s.Of }

// Shared implements Records: an etcd store read for one node holds other
// machines' records too; a file store holds this machine's.
func (s *StoreRecords) Shared() bool {
	_, ok := s.Store.(store.Cluster)
	return ok
}

// Load implements Records. A store.Store lists one network at a time.
func (s *StoreRecords) Load(ctx context.Context, network string, _ datastore.Point, keep func(*record.Record)) ([]*record.Record, error) {
	if network == "" {
		return nil, fmt.Errorf("reading safe-ipam records from the %s: it is listed one network at a time: pass --network (or --conf)", s.Where)
	}
	recs, err := s.Store.List(ctx, network)
	if err != nil {
		return nil, fmt.Errorf("reading safe-ipam records from the %s: %w", s.Where, err)
	}
	for _, rec := range recs {
		if keep != nil {
			keep(rec)
		}
	}
	return recs, nil
}

// Marks are network's quarantine marks for holders the store cannot read,
// in attachment order; none where the store keeps no such marks.
func (s *StoreRecords) Marks(ctx context.Context, network string) ([]RemoteMark, error) {
	ms, ok := s.Store.(markedStore)
	if !ok || network == "" {
		return nil, nil
	}
	marks, err := ms.QuarantineMarks(ctx, network)
	if err != nil {
		return nil, fmt.Errorf("reading the quarantine marks in the %s: %w", s.Where, err)
	}
	out := make([]RemoteMark, 0, len(marks))
	for att, m := range marks {
		out = append(out, RemoteMark{Attachment: att, Mark: m})
	}
	slices.SortFunc(out, func(a, b RemoteMark) int { return strings.Compare(a.Attachment.String(), b.Attachment.String()) })
	return out, nil
}

// Recheck implements Records with Get: the record must still be the
// committed one at the revision the audit read.
func (s *StoreRecords) Recheck(ctx context.Context, rec *record.Record) error {
	cur, err := s.Store.Get(ctx, rec.Attachment)
	switch {
	case err != nil:
		return fmt.Errorf("re-reading record %s from the %s: %w", rec.Attachment, s.Where, err)
	case cur == nil || cur.Revision != rec.Revision || cur.State != record.Committed:
		return fmt.Errorf("%w: record %s changed since the audit", ErrStale, rec.Attachment)
	}
	return nil
}

// ErrStale means what was read no longer holds: a record changed since
// the snapshot, or a fresh read no longer supports a planned action.
var ErrStale = errors.New("no longer applies")

// Forget implements Records through the etcd store's own compare-and-swap.
func (e *EtcdRecords) Forget(ctx context.Context, rec *record.Record) error {
	st := etcdstore.NewWithClient(e.Client, e.Prefix, rec.Node, 5*time.Second)
	return forget(ctx, st, rec)
}

// Forget implements Records.
func (s *StoreRecords) Forget(ctx context.Context, rec *record.Record) error {
	return forget(ctx, s.Store, rec)
}

func forget(ctx context.Context, st store.Store, rec *record.Record) error {
	_, err := st.Swap(ctx, rec.Attachment, rec, nil)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: record %s changed since the audit", ErrStale, rec.Attachment)
	}
	return err
}
