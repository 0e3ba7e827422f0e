package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// NodeSettingsFile is where install keeps the node's safe-ipam settings,
// in the CNI bin dir beside the binary it installed: the settings an
// operator gives install (handle mode, store, log) in a place calico-node
// never rewrites. In takeover mode Calico's network config, which its
// installer rewrites on every start, names no safe-ipam setting at all.
// The leading dot keeps it from ever being taken for a plugin.
const NodeSettingsFile = ".safe-ipam.json"

// NodeSettingsKeys are the ipam keys the node settings may give.
var NodeSettingsKeys = []string{"delegateHandles", "store", "logFile", "logLevel", "gcGracePeriod", "verbTimeout", outsideKey}

// ParseOnNode is Parse with the node settings in binDir (NodeSettingsFile;
// none when binDir is "" or the file is absent): each of their keys that
// the ipam section does not set is taken from them. A config says
// explicitly what it wants; the node file fills in what it leaves out.
func ParseOnNode(stdin []byte, binDir string) (*Config, error) {
	node, path, err := readNodeSettings(binDir)
	if err != nil {
		return nil, err
	}
	return parse(stdin, node, path)
}

func readNodeSettings(binDir string) (map[string]json.RawMessage, string, error) {
	if binDir == "" {
		return nil, "", nil
	}
	path := filepath.Join(binDir, NodeSettingsFile)
	data, err := bounded.Read(path, bounded.Small)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("node settings %v", err), "")
	}
	node, err := decodeNodeSettings(data, path)
	return node, path, err
}

// ParseWithNodeSettings is ParseOnNode with the node settings given as
// data (nil: none), as they will be at path: install checks with it the
// configs it leaves before it writes them, so that it never leaves one
// the plugin refuses.
func ParseWithNodeSettings(stdin, data []byte, path string) (*Config, error) {
	if data == nil {
		return parse(stdin, nil, "")
	}
	node, err := decodeNodeSettings(data, path)
	if err != nil {
		return nil, err
	}
	return parse(stdin, node, path)
}

func decodeNodeSettings(data []byte, path string) (map[string]json.RawMessage, error) {
	var node map[string]json.RawMessage
	if err := json.Unmarshal(data, &node); err != nil || node == nil {
		return nil, invalid("node settings "+path, "must be a JSON object")
	}
	for k := range node {
		if !slices.Contains(NodeSettingsKeys, k) {
			return nil, invalid("node settings "+path, fmt.Sprintf("%q is not one of %v", k, NodeSettingsKeys))
		}
	}
	return node, nil
}

// fillFromNode sets each node setting the ipam section leaves out, and
// returns those it set.
func (c *Config) fillFromNode(node map[string]json.RawMessage) []string {
	var from []string
	for k, v := range node {
		if _, set := c.ipam[k]; !set {
			c.ipam[k] = v
			from = append(from, k)
		}
	}
	slices.Sort(from)
	return from
}
