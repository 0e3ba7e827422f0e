//go:build crashpoints

package filestore

import (
	"errors"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// In crash-test builds the store remembers how a power loss could undo
// each write that is not fully synced, so the crash harness can play the
// worst outcome (DropUnsynced) before it kills the process. It is
// process-wide because the harness reaches it from a crash point, which
// knows no Store; normal builds have none of it.
var powerLoss struct {
	sync.Mutex
	undo  []func()
	paths []string // the path each undo rewrites
}

// notePowerLoss is called right before path is replaced or removed:
//   - unsynced: the loss brings back what path holds now (or its absence);
//   - nameSynced: the new name survives but its data is lost (an empty
//     file, which reads as a damaged record);
//   - dataSynced: nothing is lost, nor can an earlier write of path be
//     undone: the synced file replaced it.
func notePowerLoss(path string, d durability) {
	powerLoss.Lock()
	defer powerLoss.Unlock()
	if d == dataSynced {
		for i := len(powerLoss.paths) - 1; i >= 0; i-- {
			if powerLoss.paths[i] == path {
				powerLoss.undo = append(powerLoss.undo[:i], powerLoss.undo[i+1:]...)
				powerLoss.paths = append(powerLoss.paths[:i], powerLoss.paths[i+1:]...)
			}
		}
		return
	}
	undo := func() { rewrite(path, nil) }
	if d == unsynced {
		undo = restorer(path)
	}
	powerLoss.undo = append(powerLoss.undo, undo)
	powerLoss.paths = append(powerLoss.paths, path)
}

func restorer(path string) func() {
	data, err := bounded.Read(path, bounded.Small)
	if errors.Is(err, fs.ErrNotExist) {
		return func() { _ = os.Remove(path) }
	}
	return func() { rewrite(path, data) }
}

// rewrite puts data back at path as a power loss leaves it.
func rewrite(path string, data []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return
	}
	_, _ = f.Write(data)
	f.Close()
}

// DropUnsynced plays a power loss on this process's writes: latest first,
// each is undone as far as its durability allows.
func DropUnsynced() {
	powerLoss.Lock()
	defer powerLoss.Unlock()
	for i := len(powerLoss.undo) - 1; i >= 0; i-- {
		powerLoss.undo[i]()
	}
	powerLoss.undo, powerLoss.paths = nil, nil
}

// noteLinkLoss records how to undo an unsynced change of a symlink (the
// address index, a quarantine mark): the previous link, or none, comes
// back.
func noteLinkLoss(link string) {
	target, err := os.Readlink(link)
	undo := func() { _ = os.Remove(link) }
	if err == nil {
		undo = func() { _ = os.Remove(link); _ = os.Symlink(target, link) }
	}
	powerLoss.Lock()
	powerLoss.undo = append(powerLoss.undo, undo)
	powerLoss.paths = append(powerLoss.paths, link)
	powerLoss.Unlock()
}
