package record

import (
	"testing"

	"github.com/containernetworking/cni/pkg/utils"
)

// cniName is the CNI library's rule for container IDs and network names
// (and safe-ipam's node names), without its regexp: it must accept and
// refuse exactly what they do.
func FuzzCNIName(f *testing.F) {
	for _, s := range []string{"", "a", "0", "_a", ".a", "-a", "a_b.c-d", "k8s-pod-network", "node1.example.com",
		"a b", "a/b", "a:b", "é", "aé", "a\x00", "a\n", "A", "Z9", "z-", "a..", "\xff", "a\xff", "ab;c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lib := utils.ValidateNetworkName(s) == nil
		if cid := utils.ValidateContainerID(s) == nil; cid != lib {
			t.Fatalf("the library disagrees with itself on %q", s)
		}
		if got := cniName(s); got != lib || got != (s != "" && nodeName.MatchString(s)) {
			t.Errorf("cniName(%q) = %v; the CNI library says %v, nodeName %v", s, got, lib, nodeName.MatchString(s))
		}
		if got := ValidateNode(s) == nil; got != lib {
			t.Errorf("ValidateNode(%q) ok = %v; want %v", s, got, lib)
		}
	})
}
