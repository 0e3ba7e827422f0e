package config

import (
	"bytes"
	"encoding/json"
	"sort"
)

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
