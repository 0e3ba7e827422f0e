package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// pluginName is the CNI rule for names, which also keeps a delegate type
// from being a path.
var pluginName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

func validPluginName(s string) bool { return pluginName.MatchString(s) }

func invalid(field, why string) error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("invalid %s: %s", field, why), "")
}

// field decodes obj[key] into dst when present; dst keeps its default
// otherwise. Type mismatches are invalid config, named by key.
func field(obj map[string]json.RawMessage, key string, dst any) error {
	raw, ok := obj[key]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return invalid(fieldName(obj, key), err.Error())
	}
	return nil
}

// strictField is field for objects safe-ipam owns: unknown keys are
// typos, and a typo in a safety setting must not pass silently.
func strictField(obj map[string]json.RawMessage, key string, dst any) error {
	raw, ok := obj[key]
	if !ok {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return invalid(fieldName(obj, key), err.Error())
	}
	return nil
}

// fieldName names a key as an operator finds it in the config: keys of the
// ipam section (which has a "type" and no "ipam") are prefixed with "ipam.".
func fieldName(obj map[string]json.RawMessage, key string) string {
	if _, top := obj["ipam"]; top {
		return key
	}
	return "ipam." + key
}

// Duration is a time.Duration written as a Go duration string ("60s").
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"60s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// Std returns the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }
