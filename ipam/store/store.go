// Package store defines where safe-ipam keeps its records. Every change
// is a compare-and-swap against the revision the caller last saw, so two
// processes working on one attachment can never both win.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// ErrConflict means the stored record is not the one the caller expected.
var ErrConflict = errors.New("record changed concurrently")

// ErrUnavailable wraps failures to reach the store at all.
var ErrUnavailable = errors.New("store unavailable")

// ErrQuarantined means the attachment's delegate allocation is a
// quarantine held for another record: it must be neither released nor
// reused until that record is released.
var ErrQuarantined = errors.New("the attachment's allocation is quarantined for another record")

// HeldError means a commit would claim an address that a committed record
// of another attachment holds: the delegate handed out an address that was
// freed behind its holder's back.
type HeldError struct {
	Addr   string
	Holder *record.Record
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("address %s is held by %s", e.Addr, e.Holder.Attachment)
}

// Store keeps one record per attachment.
type Store interface {
	// Swap replaces the record of att with next if the stored record is
	// still prev (nil: no record). A nil next deletes, and with the record
	// its address index entries and the quarantines tied to it. On success
	// it returns next with its new Revision; on a mismatch it returns the
	// stored record (nil if none) and ErrConflict. Creating the record of
	// a quarantined attachment fails with ErrQuarantined.
	Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error)
	// Commit replaces pending (nil: no record) with committed, a record of
	// the same attachment, and claims committed's addresses in the
	// network's address index, in one atomic step. If a committed record of
	// another attachment holds one of them, nothing changes and the error
	// is a *HeldError; an entry whose holder is gone or being released is
	// taken over. A stale pending gives ErrConflict as Swap does.
	Commit(ctx context.Context, pending, committed *record.Record) (*record.Record, error)
	// Quarantine removes pending, the record of an ADD whose delegate gave
	// it addresses holder holds, and ties q (that allocation) to holder,
	// in one atomic step, if both are still at their revisions and holder
	// is committed (else ErrConflict). It changes holder's revision, so
	// a Swap against holder as read before (without q) conflicts instead
	// of deleting holder and losing q. Until holder is deleted, the
	// attachment answers ErrQuarantined and q is listed in holder's
	// Quarantined.
	Quarantine(ctx context.Context, pending, holder *record.Record, q record.Quarantine) error
	// Unquarantine forgets qs, quarantines tied to holder whose
	// allocations have been released, if holder is still at its revision
	// (else ErrConflict), and returns holder as stored now, without them.
	// Each call fits the store's limits whatever the number of qs (etcd
	// refuses a Txn of more than 128 operations by default), so a holder
	// with any number of quarantines is released a batch at a time, and a
	// DEL cut short keeps what it released.
	Unquarantine(ctx context.Context, holder *record.Record, qs []record.Quarantine) (*record.Record, error)
	// Get returns the record of att, or nil when there is none.
	Get(ctx context.Context, att record.Attachment) (*record.Record, error)
	// MarkReleasing replaces the record of marker's attachment, if there
	// is one, with marker (a Releasing record), without a prior read, and
	// returns what it wrote, with the quarantines tied to the record (nil
	// when there was no record; ErrQuarantined when the attachment is
	// quarantined). A store that reads anyway may keep the old record's
	// addresses and pod fields.
	MarkReleasing(ctx context.Context, marker *record.Record) (*record.Record, error)
	// List returns every record of a network.
	List(ctx context.Context, network string) ([]*record.Record, error)
	// Ping fails when the store cannot serve requests.
	Ping(ctx context.Context) error
	Close() error
}

// Cluster is a store that holds every node's records (the etcd store; a
// file store holds its own node's only). Releasing the records of a node
// that is gone writes under that node's keys.
type Cluster interface {
	Store
	// ForNode is the same store over node's records.
	ForNode(node string) Store
	// ListEveryNode returns the records of a network on every node, as
	// List does one node's, read at one point.
	ListEveryNode(ctx context.Context, network string) ([]*record.Record, error)
	// Holder names the record, on whichever node, whose address index
	// entry holds addr in network (one read, of the entry alone); nil
	// when none does.
	Holder(ctx context.Context, network, addr string) (*Holding, error)
	Sweeps
}

// Holding names the record an address index entry points at: its node
// and attachment (ForNode(Node).Get reads it).
type Holding struct {
	Node       string
	Attachment record.Attachment
}

// Sweeps is what the sweeps of every node's records (gc --dead-nodes)
// keep in a Cluster store: which process sweeps, elected so that one does
// per cluster however many nodes run gc, and which nodes earlier sweeps
// found gone, so that a node's records go only once two sweeps found it
// gone, whichever processes swept.
type Sweeps interface {
	// Lead says who sweeps network's records. With campaign it campaigns,
	// with a lease of ttl kept alive while the store stays open, unless a
	// live process leads; it returns the leader's name, this store's node
	// when it leads now. A leader's key without a live lease is no leader.
	// Closing the store gives the lead up.
	Lead(ctx context.Context, network string, ttl time.Duration, campaign bool) (string, error)
	// RecordCounts is how many records of network each node has, read at
	// one point from the keys alone, without the records.
	RecordCounts(ctx context.Context, network string) (map[string]int, error)
	// Sightings is what earlier sweeps of network noted of the nodes they
	// found gone, by node.
	Sightings(ctx context.Context, network string) (map[string]Sighting, error)
	// NoteGone notes that a sweep found node gone, first now, and that
	// grace must pass before a later sweep may release its records.
	NoteGone(ctx context.Context, network, node string, grace time.Duration) error
	// ForgetGone forgets the note (the node is back, or its records are
	// gone).
	ForgetGone(ctx context.Context, network, node string) error
}

// ForgetGoneOnceEmpty forgets the sweeps' note that node is gone once none
// of its records of network is left (a sweep, or an ADD settling a dead
// holder, released the last): state safe-ipam wrote goes with what it
// was for. A read that fails leaves it to the next sweep, which forgets
// the notes of nodes without records.
func ForgetGoneOnceEmpty(ctx context.Context, c Cluster, network, node string) error {
	left, err := c.ForNode(node).List(ctx, network)
	if err != nil || len(left) > 0 {
		return nil
	}
	return c.ForgetGone(ctx, network, node)
}

// Sighting is what a sweep noted of a node it found gone.
type Sighting struct {
	// Since is when, by the noting sweep's clock: for reports only.
	Since time.Time
	Grace time.Duration
	// Passed says the grace has passed since, by the store's clock (an
	// etcd lease of the grace), never a machine's wall clock: a sweeper
	// whose clock runs ahead cannot shorten it.
	Passed bool
	// Legacy is an older release's note (its writer's wall clock), or one
	// that does not read: no sighting. A sweep notes the node again, or
	// forgets the note with the others.
	Legacy bool
}

// Without is qs less those in drop.
func Without(qs, drop []record.Quarantine) []record.Quarantine {
	gone := make(map[record.Attachment]bool, len(drop))
	for _, q := range drop {
		gone[q.Attachment] = true
	}
	var out []record.Quarantine
	for _, q := range qs {
		if !gone[q.Attachment] {
			out = append(out, q)
		}
	}
	return out
}

// SameRevision says whether the stored record cur is the one prev names.
func SameRevision(cur, prev *record.Record) bool {
	if cur == nil || prev == nil {
		return cur == nil && prev == nil
	}
	return cur.Revision == prev.Revision
}

// Releasing is rec marked Releasing at now.
func Releasing(rec *record.Record, now time.Time) *record.Record {
	out := *rec
	out.State, out.Updated = record.Releasing, now
	return &out
}

// Damaged stands in for a stored record that does not decode: a pending
// record nobody owns, created long ago, so that ADD restarts it (after a
// release), DEL releases it and GC collects it, instead of each failing.
func Damaged(att record.Attachment, revision int64) *record.Record {
	return &record.Record{Attachment: att, State: record.Pending, Revision: revision}
}

// Reindex gives every committed record of network in st its address
// index entries, as Commit claims them. Records committed before the
// index existed have none, so fencing could not see their addresses: an
// address freed behind such a pod's back was handed out and committed
// again. Each record is re-committed over itself, one atomic step that
// compares its revision, so the migration is idempotent (an entry the
// record already has is its own) and safe to cut short anywhere. A record
// that changed meanwhile is skipped: whoever changed it indexed it. An
// address another committed record holds is a duplicate already, which
// is returned and left for the operator (the audit reports it), unless
// both hold it under one VM's shared handle (record.Shares: a live
// migration's source and target), whose entry is the VM's.
func Reindex(ctx context.Context, st Store, network string) (indexed int, held []*HeldError, err error) {
	recs, err := st.List(ctx, network)
	if err != nil {
		return 0, nil, err
	}
	for _, rec := range recs {
		if rec.State != record.Committed || len(rec.IPs) == 0 {
			continue
		}
		_, err := st.Commit(ctx, rec, rec)
		var h *HeldError
		switch {
		case err == nil:
			indexed++
		case errors.As(err, &h) && rec.Shares(h.Holder):
		case errors.As(err, &h):
			held = append(held, h)
		case errors.Is(err, ErrConflict):
		default:
			return indexed, held, fmt.Errorf("indexing the addresses of %s: %w", rec.Attachment, err)
		}
	}
	return indexed, held, nil
}
