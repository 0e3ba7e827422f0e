// Package cniargs parses and rewrites CNI_ARGS ("K=V;K=V") without
// reordering or re-encoding the pairs it keeps.
package cniargs

import (
	"fmt"
	"strings"
)

// Pod identity keys. A delegate that sees both may key or release
// addresses by pod name, which is what safe-ipam exists to prevent.
const (
	PodNamespace = "K8S_POD_NAMESPACE"
	PodName      = "K8S_POD_NAME"
	PodUID       = "K8S_POD_UID"
)

// Args is CNI_ARGS as ordered key=value pairs.
type Args struct {
	pairs [][2]string
}

// Parse splits CNI_ARGS. An empty string is no arguments; any pair without
// "=" or with an empty key is an error.
func Parse(s string) (Args, error) {
	if s == "" {
		return Args{}, nil
	}
	parts := strings.Split(s, ";")
	pairs := make([][2]string, 0, len(parts))
	for i, part := range parts {
		key, value, ok := strings.Cut(part, "=")
		if !ok || key == "" {
			return Args{}, fmt.Errorf("CNI_ARGS pair %d %q is not KEY=VALUE", i+1, part)
		}
		pairs = append(pairs, [2]string{key, value})
	}
	return Args{pairs: pairs}, nil
}

// Get returns the value of key, or "" when it is absent.
func (a Args) Get(key string) string {
	for _, p := range a.pairs {
		if p[0] == key {
			return p[1]
		}
	}
	return ""
}

// Without returns the arguments less every pair whose key is listed.
func (a Args) Without(keys ...string) Args {
	kept := make([][2]string, 0, len(a.pairs))
	for _, p := range a.pairs {
		if !contains(keys, p[0]) {
			kept = append(kept, p)
		}
	}
	return Args{pairs: kept}
}

// WithoutPodIdentity drops K8S_POD_NAMESPACE and K8S_POD_NAME so that a
// delegate keys and releases by container only.
func (a Args) WithoutPodIdentity() Args {
	return a.Without(PodNamespace, PodName)
}

// String encodes the arguments back to CNI_ARGS form.
func (a Args) String() string {
	var b strings.Builder
	for i, p := range a.pairs {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(p[0])
		b.WriteByte('=')
		b.WriteString(p[1])
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// With returns the arguments with key set to value: its pair replaced in
// place, or appended.
func (a Args) With(key, value string) Args {
	out := Args{pairs: make([][2]string, 0, len(a.pairs)+1)}
	set := false
	for _, p := range a.pairs {
		if p[0] == key {
			p[1], set = value, true
		}
		out.pairs = append(out.pairs, p)
	}
	if !set {
		out.pairs = append(out.pairs, [2]string{key, value})
	}
	return out
}
