package liveness

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
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
	Kind        string       `json:"kind"`
	ContainerID string       `json:"containerId"`
	Config      []byte       `json:"config"`
	IfName      string       `json:"ifName"`
	NetworkName string       `json:"networkName"`
	CNIArgs     [][2]string  `json:"cniArgs"`
	Result      cachedResult `json:"result"`
}

// cachedResult is the result's addresses, and the result as it was.
type cachedResult struct {
	IPs []struct {
		Address string `json:"address"`
	} `json:"ips"`
	Raw json.RawMessage `json:"-"`
}

func (r *cachedResult) UnmarshalJSON(data []byte) error {
	type plain cachedResult
	if err := json.Unmarshal(data, (*plain)(r)); err != nil {
		return err
	}
	r.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// Read reads every cache file. Any file it cannot read makes the whole
// source unreadable.
func (c CNICache) Read(context.Context) (*View, error) {
	entries, err := bounded.ReadDir(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("CNI result cache: %w", err)
	}
	var atts []Running
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
	v := NewView("cni-cache "+c.Dir, c.Node, atts)
	// The cache lists the interfaces the runtime set up itself; a
	// meta-plugin (Multus) keeps its delegates' results elsewhere, so an
	// unlisted interface of a listed container is no proof it is gone.
	v.ContainersOnly = true
	return v, nil
}

// Skipped is a cache entry a lenient read left out, and why.
type Skipped struct {
	Path   string
	Reason string
}

// CachedAttachment is an attachment with what its cache entry kept: the
// result the runtime got from ADD, as it stored it.
type CachedAttachment struct {
	Running
	Path   string
	Result json.RawMessage
}

// ReadLenient reads every cache file like Read, but leaves out an entry
// that does not decode, or whose cached config names another Calico node
// (nodename), and says why. It is for a command that acts on each entry
// alone (adopt), where one bad entry must not stop the others. Liveness
// judgments (audit, GC) use Read, which fails closed. A directory that
// cannot be read, or a file that cannot be read at all, is still an
// error: that is a broken source, not a bad entry.
func (c CNICache) ReadLenient(context.Context) ([]CachedAttachment, []Skipped, error) {
	entries, err := bounded.ReadDir(c.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("CNI result cache: %w", err)
	}
	var atts []CachedAttachment
	var skipped []Skipped
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		path := filepath.Join(c.Dir, e.Name())
		data, err := bounded.Read(path, bounded.Small)
		if err != nil {
			return nil, nil, fmt.Errorf("CNI result cache: %w", err)
		}
		a, entry, err := decodeCacheEntry(path, data)
		if err == nil {
			err = c.onThisNode(entry)
		}
		if err != nil {
			skipped = append(skipped, Skipped{Path: path, Reason: err.Error()})
			continue
		}
		atts = append(atts, CachedAttachment{Running: a, Path: path, Result: entry.Result.Raw})
	}
	return atts, skipped, nil
}

// onThisNode refuses an entry whose cached network config names another
// node as Calico's nodename: a copied or stale file, not this node's pod.
// A config without nodename names no node (Calico then uses this host's).
func (c CNICache) onThisNode(e cacheEntry) error {
	if len(e.Config) == 0 || c.Node == "" {
		return nil
	}
	var conf struct {
		Nodename string `json:"nodename"`
	}
	if err := json.Unmarshal(e.Config, &conf); err != nil {
		return fmt.Errorf("its config does not decode: %w", err)
	}
	if conf.Nodename != "" && conf.Nodename != c.Node {
		return fmt.Errorf("its config names node %q, not %q", conf.Nodename, c.Node)
	}
	return nil
}

func readCacheEntry(path string) (Running, error) {
	data, err := bounded.Read(path, bounded.Small)
	if err != nil {
		return Running{}, fmt.Errorf("CNI result cache: %w", err)
	}
	a, _, err := decodeCacheEntry(path, data)
	if err != nil {
		return Running{}, fmt.Errorf("CNI result cache %s: %w", path, err)
	}
	return a, nil
}

func decodeCacheEntry(path string, data []byte) (Running, cacheEntry, error) {
	var c cacheEntry
	if err := json.Unmarshal(data, &c); err != nil {
		return Running{}, c, err
	}
	if c.ContainerID == "" || c.IfName == "" {
		return Running{}, c, fmt.Errorf("no containerId or ifName")
	}
	a := Running{Network: c.NetworkName, ContainerID: c.ContainerID, IfName: c.IfName}
	for _, kv := range c.CNIArgs {
		switch strings.ToUpper(kv[0]) {
		case "K8S_POD_NAMESPACE":
			a.PodNamespace = kv[1]
		case "K8S_POD_NAME":
			a.PodName = kv[1]
		case "K8S_POD_UID":
			a.PodUID = kv[1]
		}
	}
	for _, ip := range c.Result.IPs {
		a.IPs = append(a.IPs, ip.Address)
	}
	return a, c, nil
}
