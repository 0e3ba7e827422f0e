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

// ForMode is manifest for mode, conflist or own-conflist (docs/install.md,
// "The modes"): the install and watch containers run --mode=<mode>, and
// they and uninstall's container mount the CNI conf dir writable, since
// those modes write network configs (Calico's, or safe-ipam's own) and
// uninstall puts them back or removes them. Every other mount of it
// (gc's) stays read-only.
func ForMode(manifest, mode string) (string, error) {
	if mode != "conflist" && mode != "own-conflist" {
		return "", fmt.Errorf("mode %q: conflist or own-conflist (takeover is the manifests' own)", mode)
	}
	lines := strings.Split(manifest, "\n")
	changed, container := 0, ""
	for i, l := range lines {
		name, isEntry := strings.CutPrefix(strings.TrimSpace(l), "- name: ")
		switch {
		case isEntry && i+2 < len(lines) && strings.Contains(lines[i+1], "image:"):
			container = name
		case isEntry && name == "cni-net-dir" && writesConfDir[container] && i+2 < len(lines) &&
			strings.TrimSpace(lines[i+2]) == "readOnly: true":
			lines[i+2] = strings.Replace(lines[i+2], "true", "false", 1)
			changed++
		case strings.TrimSpace(l) == "- --mode=takeover":
			lines[i] = strings.Replace(l, "takeover", mode, 1)
			changed++
		}
	}
	if changed == 0 {
		return "", fmt.Errorf("not a manifest of deploy/ that installs or uninstalls: nothing to change for the %s mode", mode)
	}
	return strings.Join(lines, "\n"), nil
}

// writesConfDir are the containers that write the conf dir in the
// conflist modes.
var writesConfDir = map[string]bool{"install": true, "watch": true, "uninstall": true}
