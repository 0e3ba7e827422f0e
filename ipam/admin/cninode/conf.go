// Package cninode reads a node's CNI directories as a runtime and Calico
// see them: the network config files of the conf dir (in libcni's order,
// each plugin's config as the runtime hands it over, which plugin's IPAM
// goes through safe-ipam) and which binary of the bin dir is safe-ipam.
// install, doctor and every admin command that takes --conf read through
// it; install alone writes.
package cninode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// Names of the binaries Calico puts in a node's CNI bin dir (safe-ipam's
// are in package builds).
const (
	CalicoIPAM   = "calico-ipam"
	CalicoBinary = "calico"
)

// OwnConflist is the network config install --mode=own-conflist writes:
// Calico's rendered with its IPAM through safe-ipam, under a name that
// sorts before Calico's (runtimes read the first config of the conf dir)
// and that Calico's installer never writes or removes.
const OwnConflist = "00-safe-ipam.conflist"

// Conf is one network config file of the conf dir.
type Conf struct {
	Path       string
	Network    string
	CNIVersion string
	Plugins    []Plugin
	// Err says why the file does not parse; nothing else is set then.
	Err error

	// Raw is the file as read; Perm its mode, which a rewrite keeps.
	Raw  []byte
	Perm os.FileMode
}

// Plugin is what install and doctor read of one plugin of a conflist.
type Plugin struct {
	Type     string
	IPAMType string
	// Delegate is the delegate the ipam section names, "" when none.
	Delegate string
	// Raw is the plugin's config, as libcni hands it to the plugin once
	// name and cniVersion are added (see Conf.PluginConfig).
	Raw json.RawMessage
}

// UsesCalicoIPAM says whether calico-ipam is this plugin's IPAM.
func (p Plugin) UsesCalicoIPAM() bool { return p.IPAMType == CalicoIPAM || p.Type == CalicoIPAM }

// RoutedThroughSafeIPAM says whether conflist mode's rewrite is in place:
// the IPAM is safe-ipam, and its delegate calico-ipam.
func (p Plugin) RoutedThroughSafeIPAM() bool {
	return p.IPAMType == builds.CNIBinary && (p.Delegate == CalicoIPAM || p.Delegate == "")
}

// IsCalico says whether the file configures calico-ipam, directly or
// behind safe-ipam.
func (c *Conf) IsCalico() bool {
	for _, p := range c.Plugins {
		if p.UsesCalicoIPAM() || p.RoutedThroughSafeIPAM() {
			return true
		}
	}
	return false
}

// ReadConfs reads every network config file of dir.
func ReadConfs(dir string) ([]*Conf, error) {
	files, err := ConfFiles(dir)
	if err != nil {
		return nil, err
	}
	confs := make([]*Conf, 0, len(files))
	for _, f := range files {
		confs = append(confs, ReadConf(f))
	}
	return confs, nil
}

// ReadConf reads one network config file; a file that does not parse
// comes back with Err set.
func ReadConf(path string) *Conf {
	c := &Conf{Path: path}
	st, err := os.Stat(path)
	if err != nil {
		c.Err = err
		return c
	}
	raw, err := bounded.Read(path, bounded.Small)
	if err != nil {
		c.Err = err
		return c
	}
	return ParseConf(path, raw, st.Mode().Perm())
}

// ParseConf is ReadConf of raw, the content path has (or will have) with
// mode perm.
func ParseConf(path string, raw []byte, perm os.FileMode) *Conf {
	c := &Conf{Path: path, Raw: raw, Perm: perm}
	if err := c.parse(); err != nil {
		c.Err = fmt.Errorf("%s does not parse: %w", path, err)
	}
	return c
}

type rawPlugin struct {
	Type string `json:"type"`
	IPAM *struct {
		Type     string          `json:"type"`
		Delegate json.RawMessage `json:"delegate"`
	} `json:"ipam"`
}

func (c *Conf) parse() error {
	var top struct {
		Name       string            `json:"name"`
		CNIVersion string            `json:"cniVersion"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(c.Raw, &top); err != nil {
		return err
	}
	c.Network, c.CNIVersion = top.Name, top.CNIVersion
	raws := top.Plugins
	if !c.IsList() {
		raws = []json.RawMessage{c.Raw}
	}
	for i, raw := range raws {
		p, err := readPlugin(raw)
		if err != nil {
			return fmt.Errorf("plugin %d: %w", i, err)
		}
		c.Plugins = append(c.Plugins, p)
	}
	return nil
}

// IsList says whether the file is a .conflist (a plugins array).
func (c *Conf) IsList() bool {
	var probe map[string]json.RawMessage
	_ = json.Unmarshal(c.Raw, &probe)
	_, ok := probe["plugins"]
	return ok
}

func readPlugin(raw json.RawMessage) (Plugin, error) {
	var rp rawPlugin
	if err := json.Unmarshal(raw, &rp); err != nil {
		return Plugin{}, err
	}
	p := Plugin{Type: rp.Type, Raw: raw}
	if rp.IPAM == nil {
		return p, nil
	}
	p.IPAMType = rp.IPAM.Type
	if len(rp.IPAM.Delegate) > 0 {
		var d struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(rp.IPAM.Delegate, &d); err != nil {
			return Plugin{}, fmt.Errorf("ipam.delegate: %w", err)
		}
		p.Delegate = d.Type
		if p.Delegate == "" {
			p.Delegate = CalicoIPAM
		}
	}
	return p, nil
}

// PluginConfig is plugin i's config as the runtime passes it: the
// plugin's keys plus the list's name and cniVersion.
func (c *Conf) PluginConfig(i int) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(c.Plugins[i].Raw, &obj); err != nil {
		return nil, err
	}
	if c.IsList() {
		obj["name"], _ = json.Marshal(c.Network)
		obj["cniVersion"], _ = json.Marshal(c.CNIVersion)
	}
	return json.Marshal(obj)
}

// ConfFiles lists the network config files of dir as libcni does: .conf,
// .conflist and .json, sorted by name, directories left out.
func ConfFiles(dir string) ([]string, error) {
	entries, err := bounded.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading CNI config dir: %w", err)
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(files)
	return files, nil
}

// Dirs are one node's CNI directories: the bin dir the runtime runs
// plugins from, and the conf dir it reads networks from.
type Dirs struct {
	BinDir  string
	ConfDir string
}

// Bin is the path of a binary in the bin dir.
func (d Dirs) Bin(name string) string { return filepath.Join(d.BinDir, name) }
