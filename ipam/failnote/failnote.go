// Package failnote is the CNI path's word to the watch that it is
// failing: a verb that fails for a reason of the node's (its record store
// or Calico's datastore does not answer, the delegate fails, the deadline
// passed) leaves a note in the cache dir, and the next verb that succeeds
// removes it. The watch reads the note to keep the readiness probe true
// to what pods meet (docs/operations.md says within what time).
//
// The note is the only state it keeps: one small file of the cache dir
// (package cachedir), owned by the CNI path, which removes it on its next
// success; it goes with the cache dir.
package failnote

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cachedir"
)

// File is the note's name in the cache dir.
const File = "failing.json"

// Note is one failed verb.
type Note struct {
	At      time.Time `json:"at"`
	Verb    string    `json:"verb"`
	Network string    `json:"network"`
	Code    uint      `json:"code,omitempty"`
	Msg     string    `json:"msg"`
}

func (n *Note) String() string {
	return fmt.Sprintf("%s of network %s failed at %s (code %d): %s", n.Verb, n.Network, n.At.Format(time.RFC3339), n.Code, n.Msg)
}

// Write leaves n in dir, replacing any note there; best effort, as a
// verb's failure is what the runtime must hear, not the note's.
func Write(dir string, n Note) {
	if data, err := json.Marshal(n); err == nil {
		cachedir.Put(dir, File, data)
	}
}

// Clear removes the note in dir, if any: a verb succeeded.
func Clear(dir string) {
	if dir != "" {
		_ = os.Remove(filepath.Join(dir, File))
	}
}

// Read is the note in dir; nil when there is none.
func Read(dir string) (*Note, error) {
	data, err := cachedir.Get(dir, File)
	if err != nil {
		return nil, fmt.Errorf("reading the CNI path's failure note: %w", err)
	}
	if data == nil {
		return nil, nil
	}
	var n Note
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("the CNI path's failure note %s: %w", filepath.Join(dir, File), err)
	}
	return &n, nil
}
