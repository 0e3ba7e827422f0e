// Package filestore keeps records as node-local files, one per attachment:
// <dir>/<network>/<containerID>:<ifname>. CNI forbids ':' in both names,
// so the file name is unambiguous. Writes are atomic (temp file, fsync,
// rename, fsync of the directory).
package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

const lockName = ".lock"

// Store is the file store.
type Store struct {
	dir string
}

var _ store.Store = (*Store)(nil)

// Open makes sure dir exists and is writable.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: creating %s: %v", store.ErrUnavailable, dir, err)
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
func (s *Store) Swap(_ context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	return s.locked(att, func(cur *record.Record) (*record.Record, bool) {
		if !store.SameRevision(cur, prev) {
			return cur, false
		}
		return next, true
	})
}

// MarkReleasing implements store.Store under one lock, keeping the
// record's addresses and pod fields.
func (s *Store) MarkReleasing(_ context.Context, marker *record.Record) (*record.Record, error) {
	return s.locked(marker.Attachment, func(cur *record.Record) (*record.Record, bool) {
		if cur == nil {
			return nil, true // nothing to mark; writing nil removes nothing
		}
		return keepAddresses(store.Releasing(marker, marker.Updated), cur), true
	})
}

// locked reads att's record under the network's lock and lets decide
// choose what to store: (next, true) writes next (nil deletes), (cur,
// false) reports a conflict with cur.
func (s *Store) locked(att record.Attachment, decide func(cur *record.Record) (*record.Record, bool)) (*record.Record, error) {
	if err := att.Validate(); err != nil {
		return nil, err
	}
	unlock, err := s.lock(att.Network)
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
		return nil, s.remove(att)
	}
	out := *next
	out.Attachment = att
	out.Revision = time.Now().UnixNano()
	if cur != nil && out.Revision <= cur.Revision {
		out.Revision = cur.Revision + 1
	}
	if err := s.write(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

// keepAddresses carries over what only the old record knows, so the
// marker still says which addresses are being released and for which pod.
func keepAddresses(marker, old *record.Record) *record.Record {
	marker.IPs, marker.Result, marker.Created = old.IPs, old.Result, old.Created
	marker.PodNamespace, marker.PodName, marker.PodUID = old.PodNamespace, old.PodName, old.PodUID
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
	entries, err := os.ReadDir(s.networkDir(network))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing records of %s: %w", network, err)
	}
	var out []*record.Record
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !strings.Contains(e.Name(), ":") {
			continue // lock and temp files
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

// Ping implements store.Store.
func (s *Store) Ping(context.Context) error {
	if err := syscall.Access(s.dir, 2 /* W_OK */); err != nil {
		return fmt.Errorf("%w: %s is not writable: %v", store.ErrUnavailable, s.dir, err)
	}
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error { return nil }

func (s *Store) read(path string) (*record.Record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading record %s: %w", path, err)
	}
	var fr fileRecord
	if err := json.Unmarshal(data, &fr); err != nil {
		return s.damaged(path), nil
	}
	fr.Record.Revision = fr.Revision
	return &fr.Record, nil
}

// damaged stands in for a record file that does not decode (see
// store.Damaged); its revision is the file's mtime, so a Swap against it
// succeeds until the file changes.
func (s *Store) damaged(path string) *record.Record {
	cid, ifName, _ := strings.Cut(filepath.Base(path), ":")
	var rev int64
	if info, err := os.Stat(path); err == nil {
		rev = info.ModTime().UnixNano()
	}
	return store.Damaged(record.Attachment{Network: filepath.Base(filepath.Dir(path)), ContainerID: cid, IfName: ifName}, rev)
}

func (s *Store) write(rec *record.Record) error {
	data, err := json.Marshal(fileRecord{Revision: rec.Revision, Record: *rec})
	if err != nil {
		return fmt.Errorf("encoding record %s: %w", rec.Attachment, err)
	}
	dir := s.networkDir(rec.Network)
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return fmt.Errorf("writing record %s: %w", rec.Attachment, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing record %s: %w", rec.Attachment, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing record %s: %w", rec.Attachment, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing record %s: %w", rec.Attachment, err)
	}
	if err := os.Rename(tmp.Name(), s.path(rec.Attachment)); err != nil {
		return fmt.Errorf("renaming record %s: %w", rec.Attachment, err)
	}
	return syncDir(dir)
}

func (s *Store) remove(att record.Attachment) error {
	err := os.Remove(s.path(att))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting record %s: %w", att, err)
	}
	return syncDir(s.networkDir(att.Network))
}

// lock takes the network directory's lock; it is released with the
// process, so a crash cannot leave it held.
func (s *Store) lock(network string) (func(), error) {
	dir := s.networkDir(network)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: creating %s: %v", store.ErrUnavailable, dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: opening lock in %s: %v", store.ErrUnavailable, dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
