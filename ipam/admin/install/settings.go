package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// Settings are the node settings install writes beside the binary
// (config.NodeSettingsFile): the ipam keys the plugin takes from there
// when the network config leaves them out. Nil leaves the file as it is.
type Settings map[string]any

// settingsPath is the node settings file.
func (n Node) settingsPath() string { return n.bin(config.NodeSettingsFile) }

// planSettings adds to p the writing of s merged over the file's current
// settings, when that changes it, and returns the settings the node has
// once p lands (nil: none).
func (n Node) planSettings(p *Plan, s Settings) ([]byte, error) {
	cur, err := bounded.Read(n.settingsPath(), bounded.Small)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cur = nil
	case err != nil:
		return nil, refuse("reading %v", err)
	}
	merged := map[string]any{}
	if cur != nil {
		if err := json.Unmarshal(cur, &merged); err != nil {
			if len(s) == 0 {
				return cur, nil // as they are: the plugin's parser judges them
			}
			return nil, refuse("%s does not parse: %v", n.settingsPath(), err)
		}
	}
	if !unpinned(merged) && len(s) == 0 {
		return cur, nil
	}
	for k, v := range s {
		merged[k] = v
	}
	data, err := json.MarshalIndent(merged, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding node settings: %w", err)
	}
	data = append(data, '\n')
	if !bytes.Equal(data, cur) {
		p.add(writeStep("write safe-ipam's node settings", n.settingsPath(), data, 0o644))
	}
	return data, nil
}

// withCalicoEtcd checks --store=etcd, which names Calico's etcd (install
// --help): every Calico config in confs must name one (etcd_endpoints);
// without it there is no etcd to name, and install refuses, saying which
// key is missing. The setting stays {"type": "etcd"}, without endpoints:
// the plugin then takes Calico's etcd_endpoints and etcd_*_file keys at
// each call (config.followCalicoEtcd), so the records follow when
// calico-config moves Calico's etcd, with no re-install.
func withCalicoEtcd(s Settings, confs []*cninode.Conf) (Settings, error) {
	want, ok := s["store"].(map[string]string)
	if !ok || len(want) != 1 || want["type"] != config.StoreEtcd {
		return s, nil
	}
	for _, c := range confs {
		calico, err := calicoKeys(c)
		if err != nil {
			return nil, refuse("--store=etcd: %v", err)
		}
		if len(calico.Endpoints()) == 0 {
			return nil, refuse("--store=etcd keeps records in Calico's etcd, but %s has no etcd_endpoints (Calico's datastore there: %s): use --store=file, or name an etcd of your own in ipam.store (docs/configuration.md)", c.Path, calico.Datastore())
		}
	}
	return s, nil
}

// unpinned is the node settings cur with an etcd store that earlier
// installs pinned to Calico's endpoints and TLS files at install time
// made {"type": "etcd"} again, so that it follows Calico's etcd
// (withCalicoEtcd): install writes the node settings' store only from
// --store, and --store=etcd only ever named Calico's etcd. ok says
// whether it changed anything.
func unpinned(cur map[string]any) (ok bool) {
	st, isMap := cur["store"].(map[string]any)
	if !isMap || st["type"] != config.StoreEtcd || st["endpoints"] == nil {
		return false
	}
	cur["store"] = map[string]any{"type": config.StoreEtcd}
	return true
}

// calicoKeys are the top-level keys calico-ipam reads from the first
// plugin of c whose IPAM is Calico's.
func calicoKeys(c *cninode.Conf) (config.CalicoSettings, error) {
	for i, p := range c.Plugins {
		if !p.UsesCalicoIPAM() && !p.RoutedThroughSafeIPAM() {
			continue
		}
		stdin, err := c.PluginConfig(i)
		if err != nil {
			return config.CalicoSettings{}, fmt.Errorf("%s: plugin %d: %w", c.Path, i, err)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(stdin, &top); err != nil {
			return config.CalicoSettings{}, fmt.Errorf("%s: plugin %d: %w", c.Path, i, err)
		}
		return config.ReadCalico(top)
	}
	return config.CalicoSettings{}, fmt.Errorf("%s: no plugin's IPAM is calico-ipam", c.Path)
}

// planForgetSettings adds to p the removal of the node settings when p
// takes the last safe-ipam binary off the node.
func (n Node) planForgetSettings(p *Plan) {
	if !exists(n.settingsPath()) {
		return
	}
	for _, s := range p.Steps {
		if (s.Path == n.bin(CalicoIPAM) && s.rename != "") || (s.Path == n.bin(builds.CNIBinary) && s.remove) {
			p.add(removeStep("remove safe-ipam's node settings", n.settingsPath()))
			return
		}
	}
}
