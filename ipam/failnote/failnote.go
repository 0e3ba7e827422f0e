// Package failnote is the CNI path's word to the watch that it is
// failing: an ADD or DEL that fails for a reason of the node's (its
// record store or Calico's datastore does not answer, the delegate fails,
// the deadline passed) leaves a note of its network in the cache dir, and
// the network's next ADD that succeeds removes it (a DEL's success proves
// no pod can start). The watch reads the note to keep the readiness probe true
// to what pods meet (docs/operations.md says within what time).
//
// The note is the only state it keeps: one small file of the cache dir
// (package cachedir), owned by the CNI path, which removes it on its next
// success; it goes with the cache dir.
package failnote

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cachedir"
)

// FileOf is the name of network's note in the cache dir, which networks
// may share: one note per network, so that one network's success never
// hides another's failure.
func FileOf(network string) string {
	if len(network) <= 100 && safeName.MatchString(network) {
		return "failing-" + network + ".json"
	}
	sum := sha256.Sum256([]byte(network))
	return "failing-" + hex.EncodeToString(sum[:8]) + ".json"
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

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
		cachedir.Put(dir, FileOf(n.Network), data)
	}
}

// Clear removes network's note in dir, if any: an ADD succeeded.
func Clear(dir, network string) {
	if dir != "" {
		_ = os.Remove(filepath.Join(dir, FileOf(network)))
	}
}

// Read is network's note in dir; nil when there is none.
func Read(dir, network string) (*Note, error) {
	data, err := cachedir.Get(dir, FileOf(network))
	if err != nil {
		return nil, fmt.Errorf("reading the CNI path's failure note: %w", err)
	}
	if data == nil {
		return nil, nil
	}
	var n Note
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("the CNI path's failure note %s: %w", filepath.Join(dir, FileOf(network)), err)
	}
	return &n, nil
}
