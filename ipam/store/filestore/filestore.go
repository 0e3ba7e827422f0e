// Package filestore keeps records as node-local files, one per attachment:
// <dir>/<network>/<containerID>:<ifname>. CNI forbids ':' in both names,
// so the file name is unambiguous. Writes are atomic (temp file, rename).
// Only the writes a power loss must not undo are synced, and only as far
// as needed: see durabilityOf.
package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

const lockName = ".lock"

// Store is the file store.
type Store struct {
	dir string
	// readOnly: opened by a command that only reads (audit, doctor); it
	// demands no write access and refuses to write.
	readOnly bool
}

// errReadOnly is what a write through a read-only store returns.
var errReadOnly = errors.New("the file store was opened read-only")

// OpenReadOnly opens an existing store for reading: it creates nothing,
// takes no lock, and needs only read access to dir.
func OpenReadOnly(dir string) (*Store, error) {
	if err := syscall.Access(dir, 4|1 /* R_OK|X_OK */); err != nil {
		return nil, fmt.Errorf("%w: %s is not readable: %v", store.ErrUnavailable, dir, err)
	}
	return &Store{dir: dir, readOnly: true}, nil
}

var _ store.Store = (*Store)(nil)

// Open makes sure dir exists and is writable. A dir it creates is synced
// into its parent, as network directories are (see makeNetworkDir).
func Open(dir string) (*Store, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("%w: creating %s: %v", store.ErrUnavailable, dir, err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return nil, fmt.Errorf("%w: %v", store.ErrUnavailable, err)
		}
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return nil, fmt.Errorf("%w: %s is not writable: %v", store.ErrUnavailable, dir, err)
	}
	return &Store{dir: dir}, nil
}

// fileRecord is the on-disk form: the record plus its revision, which
// here is a write time in nanoseconds made strictly increasing per file.
type fileRecord struct {
	Revision int64 `json:"revision"`
	record.Record
}

func (s *Store) networkDir(network string) string { return filepath.Join(s.dir, network) }

func (s *Store) path(att record.Attachment) string {
	return filepath.Join(s.networkDir(att.Network), att.ContainerID+":"+att.IfName)
}

// Swap implements store.Store. The lock covers only the compare and the
// write; nothing slow (such as the delegate) runs under it.
func (s *Store) Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	quarantined := false
	out, err := s.locked(ctx, att, func(cur *record.Record) (*record.Record, bool) {
		if quarantined = s.remnant(cur); quarantined {
			return nil, true
		}
		if !store.SameRevision(cur, prev) {
			return cur, false
		}
		if quarantined = cur == nil && next != nil && s.quarantined(att); quarantined {
			return nil, false
		}
		return next, true
	})
	if quarantined {
		return nil, fmt.Errorf("%s: %w", att, store.ErrQuarantined)
	}
	return out, err
}

// MarkReleasing implements store.Store under one lock, keeping the
// record's addresses and pod fields.
func (s *Store) MarkReleasing(ctx context.Context, marker *record.Record) (*record.Record, error) {
	quarantined := false
	out, err := s.locked(ctx, marker.Attachment, func(cur *record.Record) (*record.Record, bool) {
		if quarantined = s.remnant(cur); quarantined {
			return nil, true
		}
		if cur == nil {
			quarantined = s.quarantined(marker.Attachment)
			return nil, !quarantined // nothing to mark; writing nil removes nothing
		}
		return keepAddresses(store.Releasing(marker, marker.Updated), cur), true
	})
	if quarantined {
		return nil, fmt.Errorf("%s: %w", marker.Attachment, store.ErrQuarantined)
	}
	return out, err
}

// durability says what of a write must be on disk before the call returns.
// A power loss kills every pod of the node with the node, so what matters
// is only what the records say afterwards to the next ADD, DEL or GC of a
// dead attachment. Two facts make most syncs unnecessary:
//   - a record file whose data did not reach the disk is empty or torn, and
//     one that does not decode is an ownerless pending record (see
//     store.Damaged), which ADD, DEL and GC release and replace;
//   - a pending or releasing record left behind is released by the next
//     ADD (after releasing in the delegate), DEL or GC, as after a crash.
type durability int

const (
	// unsynced: a power loss may undo the write (the previous record, or
	// none, comes back) or tear it.
	unsynced durability = iota
	// nameSynced: the directory is synced after the rename, so the record's
	// name survives a power loss; its data may come back empty, which reads
	// as an ownerless pending record.
	nameSynced
	// dataSynced: the data is synced before the rename and the directory
	// after it, so the record survives a power loss whole. Only a holder
	// gaining a quarantine needs it: the quarantined attachment's DEL then
	// answers from the quarantine, so the holder's record is the one
	// thing left that releases the allocation.
	dataSynced
)

// durabilityOf classifies one write of a record from cur to next (nil:
// none). The record must survive, at least as a name, in two cases:
//   - creating it (the pending record an ADD writes before the delegate
//     allocates): lost, the delegate's allocation would have no record
//     for GC to release;
//   - marking it releasing (DEL, GC) before the delegate releases: lost,
//     a committed record of freed addresses would come back, and an ADD
//     of the attachment would replay them (an address held twice).
//
// Everything else may be undone by a power loss:
//   - a commit (pending to committed): the pending record comes back, and
//     the next ADD, DEL or GC releases the attachment;
//   - a removal (DEL or GC forgetting a releasing record, ADD dropping its
//     pending record after a failure): the releasing or pending record
//     comes back and is released again, which frees nothing more since
//     the delegate releases only the container's own handles;
//   - a replacement that is not a commit (an ADD taking over a stale
//     record, a claim left after a failed release): the older record,
//     itself pending or releasing, comes back.
func durabilityOf(cur, next *record.Record) durability {
	if next != nil && (cur == nil || next.State == record.Releasing) {
		return nameSynced
	}
	return unsynced
}

// locked reads att's record under the network's lock and lets decide
// choose what to store: (next, true) writes next (nil deletes), (cur,
// false) reports a conflict with cur.
func (s *Store) locked(ctx context.Context, att record.Attachment, decide func(cur *record.Record) (*record.Record, bool)) (*record.Record, error) {
	if err := att.Validate(); err != nil {
		return nil, err
	}
	unlock, err := s.lock(ctx, att.Network)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cur, err := s.read(s.path(att))
	if err != nil {
		return nil, err
	}
	next, ok := decide(cur)
	if !ok {
		return cur, store.ErrConflict
	}
	if next == nil {
		if cur == nil {
			return nil, nil
		}
		if err := s.unclaim(cur); err != nil {
			return nil, err
		}
		return nil, s.remove(att)
	}
	if cur != nil && cur.State != record.Committed && next.State == record.Pending {
		// An ADD taking over a stale record (after a crash) drops what it
		// owned; its delegate allocation was released first. A mark over a
		// releasing record keeps it: its DEL releases it yet.
		if err := s.unclaim(cur); err != nil {
			return nil, err
		}
	}
	out := *next
	out.Attachment = att
	out.Revision = time.Now().UnixNano()
	if cur != nil && out.Revision <= cur.Revision {
		out.Revision = cur.Revision + 1
	}
	if err := s.writeAs(&out, durabilityOf(cur, &out)); err != nil {
		return nil, err
	}
	return &out, nil
}

// keepAddresses carries over what only the old record knows, so the
// marker still says which addresses are being released and for which pod.
func keepAddresses(marker, old *record.Record) *record.Record {
	marker.IPs, marker.Result, marker.Created = old.IPs, old.Result, old.Created
	marker.PodNamespace, marker.PodName, marker.PodUID = old.PodNamespace, old.PodName, old.PodUID
	marker.Handle, marker.Quarantined, marker.SharedWith = old.Handle, old.Quarantined, old.SharedWith
	return marker
}

// Get implements store.Store.
func (s *Store) Get(_ context.Context, att record.Attachment) (*record.Record, error) {
	if err := att.Validate(); err != nil {
		return nil, err
	}
	return s.read(s.path(att))
}

// List implements store.Store.
func (s *Store) List(_ context.Context, network string) ([]*record.Record, error) {
	if err := record.ValidateNetwork(network); err != nil {
		return nil, err
	}
	entries, err := bounded.ReadDir(s.networkDir(network))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing records of %s: %w", network, err)
	}
	var out []*record.Record
	for _, e := range entries {
		if !isRecordName(e.Name()) {
			continue // lock and temp files, the address index, quarantine marks
		}
		rec, err := s.read(filepath.Join(s.networkDir(network), e.Name()))
		if err != nil {
			return nil, err
		}
		if rec != nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

// isRecordName says whether a network directory's entry is a record,
// "<containerID>:<ifname>" with exactly one colon (neither part can hold
// one), not a lock or temp file ("."), an address link ("@") or a
// quarantine mark ("q:<containerID>:<ifname>", two colons: a container
// may well be named "q").
func isRecordName(name string) bool {
	return !strings.HasPrefix(name, ".") && !strings.HasPrefix(name, "@") && strings.Count(name, ":") == 1
}

// Ping implements store.Store.
func (s *Store) Ping(context.Context) error {
	if s.readOnly {
		if err := syscall.Access(s.dir, 4|1 /* R_OK|X_OK */); err != nil {
			return fmt.Errorf("%w: %s is not readable: %v", store.ErrUnavailable, s.dir, err)
		}
		return nil
	}
	if err := syscall.Access(s.dir, 2 /* W_OK */); err != nil {
		return fmt.Errorf("%w: %s is not writable: %v", store.ErrUnavailable, s.dir, err)
	}
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error { return nil }

func (s *Store) read(path string) (*record.Record, error) {
	data, err := bounded.Read(path, bounded.Small)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading record %w", err)
	}
	var fr fileRecord
	if err := json.Unmarshal(data, &fr); err != nil {
		return s.damaged(path), nil
	}
	// A record is input like the runtime's: one that is not what its file
	// name says stands in as damaged, and a quarantine that is not one
	// safe-ipam could have written is never released (see record.Check).
	if fr.Record.CheckStored(pathAttachment(path), "") != nil {
		return s.damaged(path), nil
	}
	fr.Record.Quarantined = slices.DeleteFunc(fr.Record.Quarantined, func(q record.Quarantine) bool { return q.Check(fr.Record.Network) != nil })
	fr.Record.Revision = fr.Revision
	return &fr.Record, nil
}

// pathAttachment is the attachment a record file's path names.
func pathAttachment(path string) record.Attachment {
	cid, ifName, _ := strings.Cut(filepath.Base(path), ":")
	return record.Attachment{Network: filepath.Base(filepath.Dir(path)), ContainerID: cid, IfName: ifName}
}

// damaged stands in for a record file that does not decode (see
// store.Damaged); its revision is the file's mtime, so a Swap against it
// succeeds until the file changes. It holds the quarantines whose marks
// name its file (see strayMarks), so that its DEL, GC or ADD releases
// them as the record would have.
func (s *Store) damaged(path string) *record.Record {
	var rev int64
	if info, err := os.Stat(path); err == nil {
		rev = info.ModTime().UnixNano()
	}
	rec := store.Damaged(pathAttachment(path), rev)
	rec.Quarantined = s.strayMarks(rec.Attachment)
	return rec
}

// write replaces rec's file with its name synced, for writes outside the
// compare-and-write of locked.
func (s *Store) write(rec *record.Record) error { return s.writeAs(rec, nameSynced) }

func (s *Store) writeAs(rec *record.Record, d durability) error {
	data, err := json.Marshal(fileRecord{Revision: rec.Revision, Record: *rec})
	if err != nil {
		return fmt.Errorf("encoding record %s: %w", rec.Attachment, err)
	}
	if err := writeFile(s.path(rec.Attachment), data, d); err != nil {
		return fmt.Errorf("writing record %s: %w", rec.Attachment, err)
	}
	return nil
}

// writeFile replaces path atomically (a temp file renamed over it); with
// nameSynced the directory is synced too, and with dataSynced the data
// before it. See durability.
func writeFile(path string, data []byte, d durability) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if d == dataSynced {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	notePowerLoss(path, d)
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d != unsynced {
		return syncDir(dir)
	}
	return nil
}

// remove deletes att's record without syncing: a power loss may bring the
// record back (see durabilityOf).
func (s *Store) remove(att record.Attachment) error {
	path := s.path(att)
	notePowerLoss(path, unsynced)
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting record %s: %w", att, err)
	}
	return nil
}

// lock takes the network directory's lock; it is released with the
// process, so a crash cannot leave it held. It waits no longer than ctx:
// a holder that hangs (a process stopped while holding it) must not hang
// every CNI call behind it.
func (s *Store) lock(ctx context.Context, network string) (func(), error) {
	if s.readOnly {
		return nil, errReadOnly
	}
	dir := s.networkDir(network)
	if err := s.makeNetworkDir(dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: opening lock in %s: %v", store.ErrUnavailable, dir, err)
	}
	if err := flock(ctx, f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: locking %s: %v", store.ErrUnavailable, dir, err)
	}
	return func() { f.Close() }, nil
}

// flock takes f's lock, trying again with a growing pause (up to
// lockPause) while another process holds it, until ctx ends. An
// uncontended lock costs one system call, as a blocking flock does.
func flock(ctx context.Context, f *os.File) error {
	pause := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("another process held the lock until the deadline: %w", ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, lockPause)
	}
}

// lockPause bounds the pause between tries: short against the time a
// holder keeps the lock (a few file operations).
const lockPause = 20 * time.Millisecond

// makeNetworkDir creates a network's directory on first use, syncing the
// store's directory so that the records synced into it keep their path
// through a power loss.
func (s *Store) makeNetworkDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: creating %s: %v", store.ErrUnavailable, dir, err)
	}
	if err := syncDir(s.dir); err != nil {
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := bounded.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
