package etcdtls

import (
	"fmt"
	"net/url"
	"strings"
)

// Exposure says what the connection to etcd at endpoints lacks, or ""
// when every endpoint is https:// and a CA file is set. safe-ipam's
// records, and Calico's data on the same etcd, decide which addresses
// DEL and GC free: over plain http anyone on the path reads and rewrites
// them; with https and no CA file, etcd's certificate is checked against
// the system's roots, which any public CA can satisfy, not against the
// cluster's own CA. Both still work, so they are warned about, not
// refused.
func Exposure(endpoints []string, files Files) string {
	var plain []string
	secure := false
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err == nil && u.Scheme == "https" {
			secure = true
			continue
		}
		plain = append(plain, ep)
	}
	var out []string
	if len(plain) > 0 {
		out = append(out, fmt.Sprintf("etcd endpoint(s) %s are plain text: records and Calico's data cross the network unencrypted and unauthenticated", strings.Join(plain, ", ")))
	}
	if secure && files.CA.Path == "" {
		out = append(out, fmt.Sprintf("etcd over https with no CA file (%s): its certificate is checked against the system's roots, not the cluster's CA", files.CA.Setting))
	}
	return strings.Join(out, "; ")
}
