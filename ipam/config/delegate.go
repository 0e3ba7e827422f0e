package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
)

// CalicoBinary is Calico's multi-call binary: calico-node installs it as
// both "calico" and "calico-ipam", and it picks its role from argv[0].
const CalicoBinary = "calico"

// Delegate names the IPAM plugin safe-ipam fronts.
type Delegate struct {
	// Type is the delegate's plugin name: its ipam.type and its argv[0].
	Type   string `json:"type"`
	BinDir string `json:"binDir,omitempty"`
	// Binary is the file to run when it is not named Type: a bare name is
	// looked up as Type would be (binDir, else CNI_PATH), a path must be
	// absolute. Installed as calico-ipam, safe-ipam runs Calico's "calico"
	// binary as calico-ipam, so no second copy of Calico is kept in step.
	Binary string `json:"binary,omitempty"`
	// OutsideCNIPath allows a binDir or an absolute binary outside
	// CNI_PATH. Without safe-ipam a network config can run only what the
	// runtime's CNI_PATH holds; a config that can name any file would let
	// whoever edits it (a ConfigMap, a namespace admin's Multus
	// NetworkAttachmentDefinition) run that file as root on the next pod
	// start. So only the node decides: the node setting
	// delegateOutsideCNIPath sets it (NodeSettingsFile, written by install
	// --delegate-outside-cni-path), never a network config's key.
	OutsideCNIPath bool `json:"-"`
	// Check forwards CHECK to the delegate. Default: true, except for
	// calico-ipam, which has no CHECK.
	Check *bool `json:"check,omitempty"`
}

// ForwardsCheck says whether CHECK goes to the delegate.
func (d Delegate) ForwardsCheck() bool {
	if d.Check != nil {
		return *d.Check
	}
	return d.Type != DefaultDelegate
}

func (c *Config) readDelegate(ipamType string) error {
	c.Delegate = Delegate{Type: DefaultDelegate}
	if err := c.refuseOutsideFromConfig(); err != nil {
		return err
	}
	if err := strictField(c.ipam, "delegate", &c.Delegate); err != nil {
		return err
	}
	if err := field(c.ipam, outsideKey, &c.Delegate.OutsideCNIPath); err != nil {
		return err
	}
	if !validPluginName(c.Delegate.Type) {
		return invalid("ipam.delegate.type", fmt.Sprintf("%q is not a plugin name", c.Delegate.Type))
	}
	if c.Delegate.BinDir != "" && !filepath.IsAbs(c.Delegate.BinDir) {
		return invalid("ipam.delegate.binDir", "must be an absolute path")
	}
	if err := c.Delegate.checkBinary(); err != nil {
		return err
	}
	return c.Delegate.checkNotSelf(ipamType)
}

// outsideKey is the node setting that lets the delegate live outside
// CNI_PATH.
const outsideKey = "delegateOutsideCNIPath"

// refuseOutsideFromConfig refuses a network config that would let the
// delegate live outside CNI_PATH: the node's settings alone may.
func (c *Config) refuseOutsideFromConfig() error {
	if _, set := c.ipam[outsideKey]; set && !slices.Contains(c.FromNode, outsideKey) {
		return invalid("ipam."+outsideKey, "is a node setting (safe-ipam install --delegate-outside-cni-path), never a network config's: whoever edits a network config must not choose what runs as root")
	}
	var d map[string]json.RawMessage
	if raw, ok := c.ipam["delegate"]; ok && json.Unmarshal(raw, &d) == nil {
		if _, set := d["outsideCNIPath"]; set {
			return invalid("ipam.delegate.outsideCNIPath", "is no network config key: whoever edits a network config must not choose what runs as root; on the node that needs a delegate outside CNI_PATH, run safe-ipam install --delegate-outside-cni-path")
		}
	}
	return nil
}

func (d *Delegate) checkBinary() error {
	switch {
	case d.Binary == "" || validPluginName(d.Binary):
		return nil
	case !filepath.IsAbs(d.Binary):
		return invalid("ipam.delegate.binary", fmt.Sprintf("%q is neither a plugin name nor an absolute path", d.Binary))
	case d.BinDir != "":
		return invalid("ipam.delegate.binary", "an absolute path and binDir exclude each other")
	}
	return nil
}

// checkNotSelf refuses a delegate that names safe-ipam's own file. Run as
// calico-ipam with no delegate file given, safe-ipam has taken Calico's
// place, and Calico's multi-call binary beside it is the delegate.
func (d *Delegate) checkNotSelf(ipamType string) error {
	if d.Type != ipamType || d.BinDir != "" {
		if d.Binary == ipamType && d.BinDir == "" {
			return invalid("ipam.delegate.binary", fmt.Sprintf("%q would delegate to itself", d.Binary))
		}
		return nil
	}
	switch {
	case d.Binary != "" && d.Binary != ipamType:
		return nil
	case d.Binary == "" && d.Type == DefaultDelegate:
		d.Binary = CalicoBinary
		return nil
	}
	return invalid("ipam.delegate.type", fmt.Sprintf("%q would delegate to itself; name the real plugin's file in ipam.delegate.binary or its directory in ipam.delegate.binDir", d.Type))
}

// File is the name or path of the delegate's executable.
func (d Delegate) File() string {
	if d.Binary != "" {
		return d.Binary
	}
	return d.Type
}

// DelegateConfig is the config the delegate receives: the whole plugin
// config unchanged except that the ipam section loses safe-ipam's keys and
// names the delegate, cniVersion becomes the version spoken with the
// delegate, and prevResult (if any) is replaced by one in that version.
func (c *Config) DelegateConfig(cniVersion string, prevResult []byte) []byte {
	ipam := make(map[string]json.RawMessage, len(c.ipam))
	for k, v := range c.ipam {
		ipam[k] = v
	}
	for _, k := range ownedKeys {
		delete(ipam, k)
	}
	delegateType, _ := json.Marshal(c.Delegate.Type)
	ipam["type"] = delegateType

	top := make(map[string]json.RawMessage, len(c.top))
	for k, v := range c.top {
		top[k] = v
	}
	top["ipam"] = encodeObject(ipam)
	// Used directly as a plugin in a conflist, safe-ipam stands in the
	// delegate's place at the top level too.
	var topType string
	if json.Unmarshal(c.top["type"], &topType) == nil && topType == c.ipamType() {
		top["type"] = delegateType
	}
	top["cniVersion"], _ = json.Marshal(cniVersion)
	// A prevResult in another version than cniVersion would be misread.
	delete(top, "prevResult")
	if prevResult != nil {
		top["prevResult"] = prevResult
	}
	return encodeObject(top)
}

// encodeObject writes an object with its values exactly as given;
// json.Marshal would compact them.
func encodeObject(obj map[string]json.RawMessage) []byte {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(k)
		b.Write(name)
		b.WriteByte(':')
		b.Write(obj[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// RawPrevResult is the prevResult of the plugin config, if any.
func (c *Config) RawPrevResult() []byte {
	return c.top["prevResult"]
}

func (c *Config) ipamType() string {
	var t string
	_ = json.Unmarshal(c.ipam["type"], &t)
	return t
}
