package delegate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/invoke"
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

// Resolve finds the delegate and learns the versions it speaks, from
// cacheDir when it is fresh ("" disables the cache).
func Resolve(ctx context.Context, typ, binDir, cniPath, cacheDir string) (*Delegate, error) {
	path, info, err := find(typ, binDir, cniPath)
	if err != nil {
		return nil, err
	}
	key := versionCache{Path: path, Size: info.Size(), ModTime: info.ModTime().UnixNano()}
	cache := readCache(cacheDir)
	if c, ok := cache[path]; ok && c.Size == key.Size && c.ModTime == key.ModTime {
		return &Delegate{Type: typ, Path: path, Versions: c.Versions}, nil
	}
	pi, err := invoke.GetVersionInfo(ctx, path, nil)
	if err != nil {
		return nil, fmt.Errorf("asking %s for its CNI versions: %w", path, err)
	}
	key.Versions = pi.SupportedVersions()
	cache[path] = key
	writeCache(cacheDir, cache) // best effort: a failed write costs an exec next time
	return &Delegate{Type: typ, Path: path, Versions: key.Versions}, nil
}

func readCache(dir string) map[string]versionCache {
	cache := map[string]versionCache{}
	if dir == "" {
		return cache
	}
	data, err := os.ReadFile(filepath.Join(dir, cacheFile))
	if err == nil {
		_ = json.Unmarshal(data, &cache) // a damaged cache is just a miss
	}
	return cache
}

func writeCache(dir string, cache map[string]versionCache) {
	if dir == "" {
		return
	}
	data, err := json.Marshal(cache)
	if err != nil || os.MkdirAll(dir, 0o700) != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), filepath.Join(dir, cacheFile)) != nil {
		os.Remove(tmp.Name())
	}
}
