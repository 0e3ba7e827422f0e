package config

import (
	"encoding/json"
	"fmt"
)

// DelegateConfig is the config the delegate receives: the whole plugin
// config unchanged except that the ipam section loses safe-ipam's keys and
// names the delegate, cniVersion becomes the version spoken with the
// delegate, and prevResult (if any) is replaced by one in that version.
func (c *Config) DelegateConfig(cniVersion string, prevResult []byte) ([]byte, error) {
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
	var err error
	if top["ipam"], err = json.Marshal(ipam); err != nil {
		return nil, fmt.Errorf("encoding delegate ipam section: %w", err)
	}
	// Used directly as a plugin in a conflist, safe-ipam stands in the
	// delegate's place at the top level too.
	var topType string
	if json.Unmarshal(c.top["type"], &topType) == nil && topType == c.ipamType() {
		top["type"] = delegateType
	}
	if top["cniVersion"], err = json.Marshal(cniVersion); err != nil {
		return nil, err
	}
	if prevResult != nil {
		top["prevResult"] = prevResult
	}
	return json.Marshal(top)
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
