// Package calls is the log cni-recorder keeps of the CNI calls a runtime
// makes, for tests to read what containerd really sends.
package calls

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Call is one plugin invocation as the runtime made it.
type Call struct {
	Command     string `json:"command"`
	ContainerID string `json:"containerID"`
	NetNS       string `json:"netns"`
	IfName      string `json:"ifname"`
	Args        string `json:"args"`
	PrevResult  bool   `json:"prevResult"`
}

// ArgKeys is the keys of CNI_ARGS in the order sent.
func (c Call) ArgKeys() []string {
	var keys []string
	for _, kv := range strings.Split(c.Args, ";") {
		if k, _, ok := strings.Cut(kv, "="); ok {
			keys = append(keys, k)
		}
	}
	return keys
}

// Arg is one CNI_ARGS value.
func (c Call) Arg(key string) string {
	for _, kv := range strings.Split(c.Args, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// Append adds one call to the log at path. One short O_APPEND write per
// call keeps lines whole.
func Append(path string, c Call) error {
	line, err := json.Marshal(c)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("call log: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("call log %s: %w", path, err)
	}
	return f.Close()
}

// Read reads the log; a missing log is no calls.
func Read(path string) ([]Call, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("call log: %w", err)
	}
	defer f.Close()
	var out []Call
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("call log %s: %w", path, err)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

// Of is the calls made for one container, in order.
func Of(all []Call, containerID string) []Call {
	var out []Call
	for _, c := range all {
		if c.ContainerID == containerID {
			out = append(out, c)
		}
	}
	return out
}
