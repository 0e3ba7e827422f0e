package audit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadCNICache(t *testing.T) {
	dir := t.TempDir()
	// libcni's cachedInfo form, as containerd and CRI-O leave it.
	entry := `{"kind":"cniCacheV1","containerId":"c1","config":"e30=","ifName":"eth0","networkName":"k8s-pod-network",
		"cniArgs":[["K8S_POD_NAMESPACE","default"],["K8S_POD_NAME","web-0"],["IgnoreUnknown","1"]],
		"result":{"cniVersion":"1.0.0","ips":[{"address":"10.244.0.5/26"}]}}`
	if err := os.WriteFile(filepath.Join(dir, "k8s-pod-network-c1-eth0"), []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := ReadCNICache(dir, "node1")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Attachments) != 1 || !l.containers["c1"] || !l.pods["default.web-0"] || !l.addrs[mustAddr("10.244.0.5")] || !l.attach[[2]string{"c1", "eth0"}] {
		t.Fatalf("liveness %+v", l)
	}
	if !l.Covers("node1") || l.Covers("node2") {
		t.Error("covers the wrong nodes")
	}
	if err := os.WriteFile(filepath.Join(dir, "broken"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCNICache(dir, "node1"); err == nil {
		t.Error("a cache with an unreadable entry was trusted")
	}
	if _, err := ReadCNICache(filepath.Join(dir, "absent"), "node1"); err == nil {
		t.Error("a missing cache was read as empty")
	}
}
