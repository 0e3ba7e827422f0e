package delegate

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/safe-ipam/safe-ipam/ipam/cachedir"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
)

// versionCache remembers a delegate's VERSION answer per binary, so ADD
// and DEL do not pay an extra exec. A binary replaced in place (calico-node
// re-copies calico-ipam on every start) changes size or mtime and is asked
// again.
type versionCache struct {
	Path     string   `json:"path"`
	Size     int64    `json:"size"`
	ModTime  int64    `json:"modTime"`
	Versions []string `json:"versions"`
}

const cacheFile = "delegate-versions.json"

// Resolve finds the delegate named typ and learns the versions it speaks,
// from cacheDir when it is fresh ("" disables the cache).
func Resolve(ctx context.Context, typ, binDir, cniPath, cacheDir string) (*Delegate, error) {
	return ResolveTarget(ctx, Target{Type: typ, BinDir: binDir}, cniPath, cacheDir)
}

// ResolveTarget is Resolve for a delegate whose file may have another
// name than its type.
func ResolveTarget(ctx context.Context, t Target, cniPath, cacheDir string) (*Delegate, error) {
	defer logging.TraceFrom(ctx).Mark(logging.MarkResolved)
	path, info, err := find(t, cniPath)
	if err != nil {
		return nil, err
	}
	d := &Delegate{Type: t.Type, Path: path, Argv0: filepath.Join(filepath.Dir(path), t.Type)}
	key := versionCache{Path: path, Size: info.Size(), ModTime: info.ModTime().UnixNano()}
	// A multi-call binary may declare other versions in each role.
	slot := path
	if d.Argv0 != path {
		slot = path + " as " + t.Type
	}
	cache := readCache(cacheDir)
	if c, ok := cache[slot]; ok && c.Size == key.Size && c.ModTime == key.ModTime {
		d.Versions = c.Versions
		return d, nil
	}
	pi, err := invoke.GetVersionInfo(ctx, path, newExec(d.Argv0))
	if err != nil {
		return nil, fmt.Errorf("asking %s for its CNI versions: %w", path, err)
	}
	key.Versions = pi.SupportedVersions()
	cache[slot] = key
	writeCache(cacheDir, cache) // best effort: a failed write costs an exec next time
	d.Versions = key.Versions
	return d, nil
}

func readCache(dir string) map[string]versionCache {
	cache := map[string]versionCache{}
	if data, err := cachedir.Get(dir, cacheFile); err == nil && data != nil {
		_ = json.Unmarshal(data, &cache) // a damaged cache is just a miss
	}
	return cache
}

func writeCache(dir string, cache map[string]versionCache) {
	if data, err := json.Marshal(cache); err == nil {
		cachedir.Put(dir, cacheFile, data)
	}
}
