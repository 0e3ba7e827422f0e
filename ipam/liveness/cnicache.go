package liveness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DefaultCNICache is where libcni keeps its result cache.
const DefaultCNICache = "/var/lib/cni/results"

// CNICache is libcni's result cache, which the container runtime keeps per
// attachment it set up on one node, with the pod's CNI_ARGS and result.
type CNICache struct {
	Dir  string
	Node string
}

// cacheEntry is the part of a cache file that names the attachment and
// its pod.
type cacheEntry struct {
	Kind        string      `json:"kind"`
	ContainerID string      `json:"containerId"`
	IfName      string      `json:"ifName"`
	NetworkName string      `json:"networkName"`
	CNIArgs     [][2]string `json:"cniArgs"`
	Result      struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	} `json:"result"`
}

// Read reads every cache file. Any file it cannot read makes the whole
// source unreadable.
func (c CNICache) Read(context.Context) (*View, error) {
	entries, err := os.ReadDir(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("CNI result cache: %w", err)
	}
	var atts []Attachment
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		a, err := readCacheEntry(filepath.Join(c.Dir, e.Name()))
		if err != nil {
			return nil, err
		}
		atts = append(atts, a)
	}
	return NewView("cni-cache "+c.Dir, c.Node, atts), nil
}

func readCacheEntry(path string) (Attachment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Attachment{}, fmt.Errorf("CNI result cache: %w", err)
	}
	var c cacheEntry
	if err := json.Unmarshal(data, &c); err != nil {
		return Attachment{}, fmt.Errorf("CNI result cache %s: %w", path, err)
	}
	if c.ContainerID == "" || c.IfName == "" {
		return Attachment{}, fmt.Errorf("CNI result cache %s: no containerId or ifName", path)
	}
	a := Attachment{Network: c.NetworkName, ContainerID: c.ContainerID, IfName: c.IfName}
	for _, kv := range c.CNIArgs {
		switch strings.ToUpper(kv[0]) {
		case "K8S_POD_NAMESPACE":
			a.PodNamespace = kv[1]
		case "K8S_POD_NAME":
			a.PodName = kv[1]
		}
	}
	for _, ip := range c.Result.IPs {
		a.IPs = append(a.IPs, ip.Address)
	}
	return a, nil
}
