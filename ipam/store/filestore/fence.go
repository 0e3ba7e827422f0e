package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// The address index is one symlink per address in the network's
// directory, "@<address>" -> "<containerID>:<ifname>" of the holder: one
// small file operation under the lock. Like the commit it belongs to, it
// is not synced: after a power loss either both survive or a link names a
// record that is not committed, and such an entry is taken over. A
// quarantined attachment has "q:<containerID>:<ifname>" -> its holder's
// file, made durable by the holder's write, whose data is synced too; the
// holder's record lists the quarantine. Neither name can be a record's: container IDs
// start with a letter or digit, and a record's name has one colon, a
// mark's two (see isRecordName).

func (s *Store) addressLink(network, addr string) string {
	if a, ok := record.ParseAddr(addr); ok {
		addr = a.String()
	}
	return filepath.Join(s.networkDir(network), "@"+addr)
}

func (s *Store) quarantineLink(att record.Attachment) string {
	return filepath.Join(s.networkDir(att.Network), "q:"+att.ContainerID+":"+att.IfName)
}

func fileName(att record.Attachment) string { return att.ContainerID + ":" + att.IfName }

// Commit implements store.Store under the network's lock.
func (s *Store) Commit(ctx context.Context, pending, committed *record.Record) (*record.Record, error) {
	att := committed.Attachment
	var held error
	out, err := s.locked(ctx, att, func(cur *record.Record) (*record.Record, bool) {
		if !store.SameRevision(cur, pending) {
			return cur, false
		}
		if held = s.claim(committed); held != nil {
			return cur, false
		}
		return committed, true
	})
	if held != nil {
		return nil, held
	}
	return out, err
}

// claim points the index at committed for each address, unless a
// committed record of another attachment holds one (a *HeldError) that
// committed does not take over (record.TakesOver). An entry naming a
// record that is gone or not committed is taken over.
func (s *Store) claim(committed *record.Record) error {
	att := committed.Attachment
	var links []string
	for _, ip := range committed.IPs {
		link := s.addressLink(att.Network, ip)
		target, err := os.Readlink(link)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("%w: reading address index %s: %v", store.ErrUnavailable, link, err)
		case target != fileName(att) && isRecordName(target) && !strings.Contains(target, "/"):
			// The link is input too: only a record's name in this
			// network's directory is read as its holder; anything else
			// names no record, and is taken over.
			holder, err := s.read(filepath.Join(s.networkDir(att.Network), target))
			if err != nil {
				return err
			}
			if holder != nil && holder.State == record.Committed && !committed.TakesOver(holder) {
				return &store.HeldError{Addr: ip, Holder: holder}
			}
		}
		links = append(links, link)
	}
	for _, link := range links {
		if err := replaceLink(link, fileName(att)); err != nil {
			return err
		}
	}
	return nil
}

func replaceLink(link, target string) error {
	noteLinkLoss(link)
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("%w: writing address index %s: %v", store.ErrUnavailable, link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		return fmt.Errorf("%w: writing address index %s: %v", store.ErrUnavailable, link, err)
	}
	return nil
}

// unclaim removes the index entries that still name rec's attachment and
// the marks of the quarantines tied to it.
func (s *Store) unclaim(rec *record.Record) error {
	for _, ip := range rec.IPs {
		link := s.addressLink(rec.Network, ip)
		if target, err := os.Readlink(link); err == nil && target == fileName(rec.Attachment) {
			noteLinkLoss(link)
			if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing address index %s: %w", link, err)
			}
		}
	}
	for _, q := range rec.Quarantined {
		noteLinkLoss(s.quarantineLink(q.Attachment))
		if err := os.Remove(s.quarantineLink(q.Attachment)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing quarantine of %s: %w", q.Attachment, err)
		}
	}
	return nil
}

// quarantined says whether att's allocation is a quarantine: its mark
// names a holder whose record lists att (a damaged one lists the marks
// naming it, see strayMarks). A mark whose holder is gone or does not
// list att is what a crash or power loss leaves between the writes of
// Quarantine or Unquarantine: no record holds its allocation for a
// running attachment, so the mark goes and att's DEL releases the
// allocation as any other.
func (s *Store) quarantined(att record.Attachment) bool {
	link := s.quarantineLink(att)
	target, err := os.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true // a mark that cannot be read still fences
	}
	if isRecordName(target) && !strings.Contains(target, "/") {
		holder, err := s.read(filepath.Join(s.networkDir(att.Network), target))
		if err != nil || lists(holder, att) {
			return true
		}
	}
	noteLinkLoss(link)
	return os.Remove(link) != nil
}

// remnant says whether cur is a pending record that a quarantine of its
// attachment was removing when it was cut short (a crash, or a power loss
// that undid the removal): no ADD can write a pending record once its
// attachment is marked (Swap refuses), so a pending record beside a
// standing mark is that one. Its allocation is the quarantine's: the
// caller finishes the removal instead of releasing it.
func (s *Store) remnant(cur *record.Record) bool {
	return cur != nil && cur.State == record.Pending && s.quarantined(cur.Attachment)
}

// lists says whether rec holds a quarantine of att.
func lists(rec *record.Record, att record.Attachment) bool {
	return rec != nil && slices.ContainsFunc(rec.Quarantined, func(q record.Quarantine) bool { return q.Attachment == att })
}

// strayMarks are the quarantines whose marks name holder's file. A record
// that lost its data (a power loss emptied it) no longer lists them, yet
// their allocations are held until it is released; read as damaged, it
// stands in with them, so its DEL, GC or ADD releases them.
func (s *Store) strayMarks(holder record.Attachment) []record.Quarantine {
	dir := s.networkDir(holder.Network)
	entries, err := bounded.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []record.Quarantine
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "q:")
		if !ok || !isRecordName(name) {
			continue
		}
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err != nil || target != fileName(holder) {
			continue
		}
		q := record.Quarantine{Attachment: pathAttachment(filepath.Join(dir, name))}
		if q.Check(holder.Network) == nil {
			out = append(out, q)
		}
	}
	return out
}

// Quarantine implements store.Store under the network's lock: the holder's
// record lists q, a link marks the attachment, and its pending record goes.
func (s *Store) Quarantine(ctx context.Context, pending, holder *record.Record, q record.Quarantine) error {
	if err := pending.Attachment.Validate(); err != nil {
		return err
	}
	if err := holder.Attachment.Validate(); err != nil {
		return err
	}
	if pending.Network != holder.Network {
		return fmt.Errorf("quarantine of %s for %s: networks differ", pending.Attachment, holder.Attachment)
	}
	unlock, err := s.lock(ctx, pending.Network)
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := s.read(s.path(pending.Attachment))
	if err != nil {
		return err
	}
	h, err := s.read(s.path(holder.Attachment))
	if err != nil {
		return err
	}
	if !store.SameRevision(cur, pending) || !store.SameRevision(h, holder) || h.State != record.Committed {
		return fmt.Errorf("%w: quarantining %s for %s", store.ErrConflict, pending.Attachment, holder.Attachment)
	}
	q.Node = cur.Node // the quarantined attachment's node, as the etcd store names it
	h.Quarantined = append(h.Quarantined, q)
	h.Revision = max(time.Now().UnixNano(), h.Revision+1)
	if err := os.Symlink(fileName(holder.Attachment), s.quarantineLink(pending.Attachment)); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: marking quarantine of %s: %v", store.ErrUnavailable, pending.Attachment, err)
	}
	if err := s.writeAs(h, dataSynced); err != nil {
		return err
	}
	return s.remove(pending.Attachment)
}

// Unquarantine implements store.Store under the network's lock: the
// holder's record drops qs, and their marks go.
func (s *Store) Unquarantine(ctx context.Context, holder *record.Record, qs []record.Quarantine) (*record.Record, error) {
	if err := holder.Attachment.Validate(); err != nil {
		return nil, err
	}
	unlock, err := s.lock(ctx, holder.Network)
	if err != nil {
		return nil, err
	}
	defer unlock()
	h, err := s.read(s.path(holder.Attachment))
	if err != nil {
		return nil, err
	}
	if !store.SameRevision(h, holder) {
		return nil, fmt.Errorf("%w: forgetting quarantines of %s", store.ErrConflict, holder.Attachment)
	}
	// The marks go first: a crash before the write leaves the holder
	// listing quarantines its next DEL releases again (the delegate's DEL
	// is idempotent), never a mark no record lists.
	for _, q := range qs {
		noteLinkLoss(s.quarantineLink(q.Attachment))
		if err := os.Remove(s.quarantineLink(q.Attachment)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("removing quarantine of %s: %w", q.Attachment, err)
		}
	}
	h.Quarantined = store.Without(h.Quarantined, qs)
	h.Revision = max(time.Now().UnixNano(), h.Revision+1)
	if err := s.write(h); err != nil {
		return nil, err
	}
	return h, nil
}

// A quarantine whose holder this store cannot read (another node's
// record, known by its cluster-wide claim) is marked by a regular file
// in place of the link, "q:<containerID>:<ifname>", holding a
// record.RemoteQuarantine: a mark that is not a link fences as one that
// cannot be read does, until the node's gc forgets it (ForgetRemote).

// QuarantineFor implements claims.Local under the network's lock: the
// mark m quarantines pending's attachment, made durable, and the pending
// record goes.
func (s *Store) QuarantineFor(ctx context.Context, pending *record.Record, m record.RemoteQuarantine) error {
	if err := pending.Attachment.Validate(); err != nil {
		return err
	}
	if err := m.Check(pending.Attachment); err != nil {
		return err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding the quarantine of %s: %w", pending.Attachment, err)
	}
	unlock, err := s.lock(ctx, pending.Network)
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := s.read(s.path(pending.Attachment))
	if err != nil {
		return err
	}
	if !store.SameRevision(cur, pending) {
		return fmt.Errorf("%w: quarantining %s for %s", store.ErrConflict, pending.Attachment, m.Holder.Attachment)
	}
	// The mark must outlive a power loss: without it the attachment's DEL
	// would release an address a running pod of another node holds.
	if err := writeFile(s.quarantineLink(pending.Attachment), data, dataSynced); err != nil {
		return fmt.Errorf("%w: marking quarantine of %s: %v", store.ErrUnavailable, pending.Attachment, err)
	}
	return s.remove(pending.Attachment)
}

// RemoteQuarantines are network's quarantines whose holders this store
// cannot read, by quarantined attachment. A mark that does not decode is
// left out, and goes on fencing.
func (s *Store) RemoteQuarantines(ctx context.Context, network string) (map[record.Attachment]record.RemoteQuarantine, error) {
	marks, err := s.QuarantineMarks(ctx, network)
	if err != nil {
		return nil, err
	}
	out := map[record.Attachment]record.RemoteQuarantine{}
	for att, m := range marks {
		if m != nil {
			out[att] = *m
		}
	}
	return out, nil
}

// QuarantineMarks are network's quarantine marks for holders this store
// cannot read, by quarantined attachment, nil for a mark that does not
// decode: each keeps its attachment's allocation, which no record of this
// store names, out of Calico's free addresses (the audit must not take it
// for a leak).
func (s *Store) QuarantineMarks(_ context.Context, network string) (map[record.Attachment]*record.RemoteQuarantine, error) {
	if err := record.ValidateNetwork(network); err != nil {
		return nil, err
	}
	dir := s.networkDir(network)
	entries, err := bounded.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing quarantines of %s: %w", network, err)
	}
	out := map[record.Attachment]*record.RemoteQuarantine{}
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "q:")
		if !ok || !isRecordName(name) || !e.Type().IsRegular() {
			continue
		}
		att := pathAttachment(filepath.Join(dir, name))
		out[att] = nil
		if m, err := s.readRemote(att); err == nil {
			out[att] = &m
		}
	}
	return out, nil
}

func (s *Store) readRemote(att record.Attachment) (record.RemoteQuarantine, error) {
	var m record.RemoteQuarantine
	data, err := bounded.Read(s.quarantineLink(att), bounded.Small)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("the quarantine mark of %s does not decode", att)
	}
	return m, m.Check(att)
}

// UpdateRemote replaces att's mark prev with next (a gc round's note that
// the holder's claim is gone, or back), if it is still prev, under the
// network's lock; else ErrConflict.
func (s *Store) UpdateRemote(ctx context.Context, att record.Attachment, prev, next record.RemoteQuarantine) error {
	return s.changeRemote(ctx, att, prev, func() error {
		if err := next.Check(att); err != nil {
			return err
		}
		data, err := json.Marshal(next)
		if err != nil {
			return err
		}
		return writeFile(s.quarantineLink(att), data, dataSynced)
	})
}

// ForgetRemote removes att's mark if it is still m, under the network's
// lock: what it kept has been released.
func (s *Store) ForgetRemote(ctx context.Context, att record.Attachment, m record.RemoteQuarantine) error {
	return s.changeRemote(ctx, att, m, func() error {
		noteLinkLoss(s.quarantineLink(att))
		if err := os.Remove(s.quarantineLink(att)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing quarantine of %s: %w", att, err)
		}
		return nil
	})
}

// changeRemote runs change under the network's lock if att's mark is
// still prev.
func (s *Store) changeRemote(ctx context.Context, att record.Attachment, prev record.RemoteQuarantine, change func() error) error {
	if err := att.Validate(); err != nil {
		return err
	}
	unlock, err := s.lock(ctx, att.Network)
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := s.readRemote(att)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // forgotten already: by another gc run, or the GC verb
	}
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(cur, prev) {
		return fmt.Errorf("%w: the quarantine mark of %s changed", store.ErrConflict, att)
	}
	return change()
}
