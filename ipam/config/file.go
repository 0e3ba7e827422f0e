package config

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/containernetworking/cni/libcni"
)

// File is what an admin command learns from a node's CNI config file:
// the network, the Calico keys of its IPAM plugin, and safe-ipam's own
// config when the file routes IPAM through safe-ipam.
type File struct {
	Path    string
	Network string
	Calico  Calico
	// SafeIPAM is nil when the file's IPAM is not safe-ipam's.
	SafeIPAM *Config
}

// ReadFile reads a .conflist, or a single plugin's .conf, and picks the
// plugin that has an ipam section (Calico's main plugin, or an IPAM-only
// plugin). libcni parses it as a runtime would.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CNI config: %w", err)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	var list *libcni.NetworkConfigList
	if _, isList := probe["plugins"]; isList {
		list, err = libcni.NetworkConfFromBytes(data)
	} else {
		var one *libcni.PluginConfig
		if one, err = libcni.NetworkPluginConfFromBytes(data); err == nil {
			list, err = libcni.ConfListFromConf(one)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	for _, p := range list.Plugins {
		if p.Network.IPAM.Type != "" {
			return fileFromPlugin(path, list, p)
		}
	}
	return nil, fmt.Errorf("CNI config %s: no plugin of network %q has an ipam section", path, list.Name)
}

func fileFromPlugin(path string, list *libcni.NetworkConfigList, p *libcni.PluginConfig) (*File, error) {
	// A runtime hands each plugin the list's name and version; do the same.
	full, err := libcni.InjectConf(p, map[string]any{"name": list.Name, "cniVersion": list.CNIVersion})
	if err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(full.Bytes, &top); err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	f := &File{Path: path, Network: list.Name}
	if f.Calico, err = readCalico(top); err != nil {
		return nil, fmt.Errorf("CNI config %s: %w", path, err)
	}
	if !namesSafeIPAM(top) {
		return f, nil
	}
	if f.SafeIPAM, err = Parse(full.Bytes); err != nil {
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
	return ipam.Type == "safe-ipam" || ipam.Delegate != nil
}
