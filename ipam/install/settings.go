package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// Settings are the node settings install writes beside the binary
// (config.NodeSettingsFile): the ipam keys the plugin takes from there
// when the network config leaves them out. Nil leaves the file as it is.
type Settings map[string]any

// settingsPath is the node settings file.
func (n Node) settingsPath() string { return n.bin(config.NodeSettingsFile) }

// planSettings adds to p the writing of s merged over the file's current
// settings, when that changes it.
func (n Node) planSettings(p *Plan, s Settings) error {
	if len(s) == 0 {
		return nil
	}
	cur, err := os.ReadFile(n.settingsPath())
	merged := map[string]any{}
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return refuse("reading %s: %v", n.settingsPath(), err)
	default:
		if err := json.Unmarshal(cur, &merged); err != nil {
			return refuse("%s does not parse: %v", n.settingsPath(), err)
		}
	}
	for k, v := range s {
		merged[k] = v
	}
	data, err := json.MarshalIndent(merged, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding node settings: %w", err)
	}
	data = append(data, '\n')
	if !bytes.Equal(data, cur) {
		p.add(writeStep("write safe-ipam's node settings", n.settingsPath(), data, 0o644))
	}
	return nil
}

// planForgetSettings adds to p the removal of the node settings when p
// takes the last safe-ipam binary off the node.
func (n Node) planForgetSettings(p *Plan) {
	if !exists(n.settingsPath()) {
		return
	}
	for _, s := range p.Steps {
		if (s.Path == n.bin(CalicoIPAM) && s.rename != "") || (s.Path == n.bin(SafeIPAM) && s.remove) {
			p.add(removeStep("remove safe-ipam's node settings", n.settingsPath()))
			return
		}
	}
}
