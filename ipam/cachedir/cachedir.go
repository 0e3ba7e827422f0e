// Package cachedir keeps the small files of safe-ipam's cache dir
// (ipam.cacheDir): the delegate version cache and the CNI path's failure
// note. Each is written whole, a temporary file renamed into place, so a
// reader never sees half of one; a crash can leave a temporary file
// (".tmp-*"), which is only a few bytes and goes with the dir.
package cachedir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// Put writes data as name in dir, making dir if need be. It is best
// effort: what it keeps only saves work or tells the watch something, and
// the call that writes it must not fail for it. It reports whether the
// file is in place.
func Put(dir, name string, data []byte) bool {
	if dir == "" || os.MkdirAll(dir, 0o700) != nil {
		return false
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return false
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), filepath.Join(dir, name)) != nil {
		os.Remove(tmp.Name())
		return false
	}
	return true
}

// Get reads name in dir (at most bounded.Small); nil, nil when it is not
// there.
func Get(dir, name string) ([]byte, error) {
	if dir == "" {
		return nil, nil
	}
	data, err := bounded.Read(filepath.Join(dir, name), bounded.Small)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}
