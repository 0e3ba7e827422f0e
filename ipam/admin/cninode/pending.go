package cninode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// PendingForgetFile is where uninstall keeps, in the CNI bin dir, the
// safe-ipam configs whose records it has not forgotten yet. It writes the
// file before it restores Calico's files (afterwards no config names
// safe-ipam, and the records could not be found again) and removes it
// once every record is forgotten: a run cut short leaves it, the next
// run finishes from it, and doctor reports the node half uninstalled.
// The leading dot keeps it from ever being taken for a plugin.
const PendingForgetFile = ".safe-ipam-uninstall.json"

// PendingForget is the content of PendingForgetFile.
type PendingForget struct {
	Networks []PendingNetwork `json:"networks"`
}

// PendingNetwork is one config whose records are still to be forgotten:
// the plugin config as the runtime handed it over, and the node settings
// it was read with (uninstall removes their file).
type PendingNetwork struct {
	Path         string          `json:"path"`
	Network      string          `json:"network"`
	Plugin       json.RawMessage `json:"plugin"`
	NodeSettings json.RawMessage `json:"nodeSettings,omitempty"`
}

// ReadPendingForget reads binDir's PendingForgetFile: nil when there is
// none.
func ReadPendingForget(binDir string) (*PendingForget, error) {
	path := filepath.Join(binDir, PendingForgetFile)
	data, err := bounded.Read(path, bounded.Small)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p PendingForget
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &p, nil
}
