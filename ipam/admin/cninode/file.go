package cninode

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// File is what an admin command learns from a node's CNI config file:
// the network, the Calico keys of its IPAM plugin, and safe-ipam's own
// config when the file routes IPAM through safe-ipam.
type File struct {
	Path    string
	Network string
	Calico  config.CalicoSettings
	// SafeIPAM is nil when the file's IPAM is not safe-ipam's.
	SafeIPAM *config.Config
	// Plugin is the config of the plugin with the ipam section, as the
	// runtime hands it over.
	Plugin []byte
}

// ReadFile reads a .conflist, or a single plugin's .conf, and picks the
// plugin that has an ipam section (Calico's main plugin, or an IPAM-only
// plugin), with its config as the runtime hands it over. binDir is the
// node's CNI bin dir: when its calico-ipam is safe-ipam (the takeover
// install, which leaves every config as Calico wrote it), an IPAM of type
// calico-ipam is safe-ipam's too. "" reads the file alone. A config of
// Calico's that safe-ipam's own (install --mode=own-conflist) shadows in
// its dir is read as the runtime reads its network: safe-ipam's.
func ReadFile(path, binDir string) (*File, error) {
	c := ReadConf(path)
	if c.Err != nil {
		return nil, fmt.Errorf("CNI config: %w", c.Err)
	}
	if own := shadowedBy(c); own != nil {
		c, path = own, own.Path
	}
	for i, p := range c.Plugins {
		if p.IPAMType == "" {
			continue
		}
		stdin, err := c.PluginConfig(i)
		if err != nil {
			return nil, fmt.Errorf("CNI config %s: plugin %d: %w", path, i, err)
		}
		takenOver, err := isTakenOver(p, binDir)
		if err != nil {
			return nil, fmt.Errorf("CNI config %s: %w", path, err)
		}
		return fileFromPlugin(path, c.Network, stdin, takenOver, binDir)
	}
	return nil, fmt.Errorf("CNI config %s: no plugin of network %q has an ipam section", path, c.Network)
}

// shadowedBy is safe-ipam's own config beside c when it configures c's
// network through safe-ipam and sorts first: the runtime reads it and not
// c. nil otherwise.
func shadowedBy(c *Conf) *Conf {
	dir, base := filepath.Split(c.Path)
	if base == OwnConflist {
		return nil
	}
	own := ReadConf(filepath.Join(dir, OwnConflist))
	if own.Err != nil || own.Network != c.Network || !slices.ContainsFunc(own.Plugins, Plugin.RoutedThroughSafeIPAM) {
		return nil
	}
	files, err := ConfFiles(dir)
	if err != nil || len(files) == 0 || files[0] != own.Path {
		return nil
	}
	return own
}

// isTakenOver says whether p's IPAM is calico-ipam and binDir's
// calico-ipam is safe-ipam: the runtime then runs safe-ipam for it.
func isTakenOver(p Plugin, binDir string) (bool, error) {
	if binDir == "" || p.IPAMType != CalicoIPAM {
		return false, nil
	}
	return IsSafeIPAM(Dirs{BinDir: binDir}.Bin(CalicoIPAM))
}

func fileFromPlugin(path, network string, stdin []byte, takenOver bool, binDir string) (*File, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &top); err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	f := &File{Path: path, Network: network, Plugin: stdin}
	var err error
	if f.Calico, err = config.ReadCalico(top); err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	if !takenOver && !namesSafeIPAM(top) {
		return f, nil
	}
	if f.SafeIPAM, err = config.ParseOnNode(stdin, binDir); err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	return f, nil
}

// namesSafeIPAM: the ipam section is safe-ipam's when it says so, or when
// it carries safe-ipam's delegate (installed as calico-ipam, it keeps
// Calico's type name).
func namesSafeIPAM(top map[string]json.RawMessage) bool {
	var ipam struct {
		Type     string          `json:"type"`
		Delegate json.RawMessage `json:"delegate"`
	}
	_ = json.Unmarshal(top["ipam"], &ipam)
	return ipam.Type == builds.CNIBinary || ipam.Delegate != nil
}
