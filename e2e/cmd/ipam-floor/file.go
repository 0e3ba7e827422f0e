package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// fileRecords does per call the file system work of ipam/store/filestore
// and no more: every write under the network directory's flock, after
// reading the current record; ADD's pending record by temp file, rename
// and a directory sync (the store's nameSynced), its commit by temp file
// and rename, unsynced, plus one address index symlink (temp, rename) per
// address; DEL's releasing mark as ADD's pending record, its forget an
// unsynced unlink of the index entries and the record. That is 1 fsync and
// 2 + addresses renames per ADD, 1 fsync and 1 rename per DEL.
type fileRecords struct {
	dir string
	att attachment
	ips []string // of the record read before DEL's mark
}

func (f *fileRecords) path() string {
	return filepath.Join(f.dir, f.att.containerID+":"+f.att.ifName)
}

func (f *fileRecords) before(verb string) error {
	return f.locked(func(cur []byte) error {
		state := "pending"
		if verb == "DEL" {
			if cur == nil {
				return nil // nothing to mark
			}
			var r struct {
				IPs []string `json:"ips"`
			}
			if err := json.Unmarshal(cur, &r); err != nil {
				return err
			}
			f.ips, state = r.IPs, "releasing"
		}
		return f.write(f.path(), record(f.att, state, f.ips, nil), true)
	})
}

func (f *fileRecords) after(verb string, result []byte) error {
	return f.locked(func(_ []byte) error {
		if verb == "DEL" {
			for _, ip := range f.ips {
				if err := os.Remove(filepath.Join(f.dir, "@"+ip)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
			if err := os.Remove(f.path()); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}
		ips, err := addresses(result)
		if err != nil {
			return err
		}
		for _, ip := range ips {
			link := filepath.Join(f.dir, "@"+ip)
			_ = os.Remove(link + ".tmp")
			if err := os.Symlink(filepath.Base(f.path()), link+".tmp"); err != nil {
				return err
			}
			if err := os.Rename(link+".tmp", link); err != nil {
				return err
			}
		}
		return f.write(f.path(), record(f.att, "committed", ips, result), false)
	})
}

// locked runs fn with the current record under the directory's lock.
func (f *fileRecords) locked(fn func(cur []byte) error) error {
	if _, err := os.Stat(f.dir); err != nil {
		if err := os.MkdirAll(f.dir, 0o700); err != nil {
			return err
		}
	}
	lock, err := os.OpenFile(filepath.Join(f.dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	cur, err := os.ReadFile(f.path())
	if errors.Is(err, fs.ErrNotExist) {
		cur, err = nil, nil
	}
	if err != nil {
		return err
	}
	return fn(cur)
}

// write replaces path by a temp file's rename; synced, the directory is
// synced after it, so that the name survives a power loss.
func (f *fileRecords) write(path string, data []byte, synced bool) error {
	tmp, err := os.CreateTemp(f.dir, ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if !synced {
		return nil
	}
	d, err := os.Open(f.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
