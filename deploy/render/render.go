// Package render writes deploy/'s manifests for a node whose CNI dirs are
// not /opt/cni/bin and /etc/cni/net.d (k3s, some distributions): the
// dirs appear in hostPaths, mountPaths and flags, and must change
// together, since the containers mount them at their host paths (Calico's
// config names its TLS files by host path).
package render

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The dirs deploy/'s manifests are written for.
const (
	DefaultBinDir  = "/opt/cni/bin"
	DefaultConfDir = "/etc/cni/net.d"
)

// Dirs are a node's CNI dirs.
type Dirs struct {
	BinDir, ConfDir string
}

// Manifest is manifest with the default dirs replaced by d's, wherever a
// whole path names them.
func Manifest(manifest string, d Dirs) (string, error) {
	for _, p := range []string{d.BinDir, d.ConfDir} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, " \t\n\"'#:") {
			return "", fmt.Errorf("CNI dir %q: want a clean absolute path", p)
		}
	}
	// One pass, so that a new dir that holds an old one (k3s's conf dir
	// ends in etc/cni/net.d) is not replaced again; a whole path only,
	// not the start of a longer name (a file in the dir keeps its name
	// under the new dir).
	to := map[string]string{DefaultBinDir: d.BinDir, DefaultConfDir: d.ConfDir}
	return dirs.ReplaceAllStringFunc(manifest, func(m string) string {
		for from, dir := range to {
			if rest, ok := strings.CutPrefix(m, from); ok {
				return dir + rest
			}
		}
		return m
	}), nil
}

var dirs = regexp.MustCompile(`(` + regexp.QuoteMeta(DefaultBinDir) + `|` + regexp.QuoteMeta(DefaultConfDir) + `)(/|\b|$)`)

// ForMode is manifest for mode, takeover, conflist or own-conflist
// (docs/install.md, "The modes"): the install and watch containers run
// --mode=<mode>, and they and uninstall's container mount the CNI conf
// dir writable in the modes that write network configs (Calico's, or
// safe-ipam's own), read-only in takeover, which writes only the bin dir.
// Every other mount of it (gc's) stays read-only. deploy/'s manifests are
// own-conflist's.
func ForMode(manifest, mode string) (string, error) {
	if !slices.Contains(modes, mode) {
		return "", fmt.Errorf("mode %q: takeover, conflist or own-conflist", mode)
	}
	readOnly := fmt.Sprintf("readOnly: %v", mode == "takeover")
	lines := strings.Split(manifest, "\n")
	found, container := 0, ""
	for i, l := range lines {
		name, isEntry := strings.CutPrefix(strings.TrimSpace(l), "- name: ")
		flag, isMode := strings.CutPrefix(strings.TrimSpace(l), "- --mode=")
		switch {
		case isEntry && i+2 < len(lines) && strings.Contains(lines[i+1], "image:"):
			container = name
		case isEntry && name == "cni-net-dir" && writesConfDir[container] && i+2 < len(lines) &&
			strings.HasPrefix(strings.TrimSpace(lines[i+2]), "readOnly: "):
			lines[i+2] = lines[i+2][:strings.Index(lines[i+2], "readOnly: ")] + readOnly
			found++
		case isMode && slices.Contains(modes, flag):
			lines[i] = strings.Replace(l, flag, mode, 1)
			found++
		}
	}
	if found == 0 {
		return "", fmt.Errorf("not a manifest of deploy/ that installs or uninstalls: nothing to set for the %s mode", mode)
	}
	return strings.Join(lines, "\n"), nil
}

// modes are the install modes, as safe-ipam install --mode names them.
var modes = []string{"takeover", "conflist", "own-conflist"}

// writesConfDir are the containers that write the conf dir in the
// conflist modes.
var writesConfDir = map[string]bool{"install": true, "watch": true, "uninstall": true}
