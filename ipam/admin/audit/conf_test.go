package audit_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
)

// --conf learns Calico's etcd and node the way calico-ipam does: the
// config calico-etcd.yaml renders has etcd_endpoints but no
// datastore_type, and no nodename (calico-node writes the name to a file).
func TestConfGivesEtcdNodeAndNetwork(t *testing.T) {
	w := newWorld(t)
	ip := w.allocate(blk, "node1", "net1.gone", podAttrs("old"))
	dir := t.TempDir()
	nodeFile := filepath.Join(dir, "nodename")
	if err := os.WriteFile(nodeFile, []byte("node1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "10-calico.conflist")
	list := fmt.Sprintf(`{"name":"net1","cniVersion":"1.0.0","plugins":[{"type":"calico","etcd_endpoints":%q,"nodename_file":%q,
		"ipam":{"type":"safe-ipam","store":{"type":"file","dir":%q}}}]}`, w.etcd.Endpoint(), nodeFile, dir)
	if err := os.WriteFile(conf, []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	live := w.liveFile(liveness.Running{ContainerID: "c1", IfName: "eth0", PodNamespace: "default", PodName: "web-1"})

	var stdout, stderr bytes.Buffer
	code := runCmd([]string{"--conf", conf, "--live", live, "--json"}, &stdout, &stderr, false)
	var rep audit.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, %v\n%s", code, err, stderr.String())
	}
	f := find(rep.Findings, audit.Leak)
	if code != audit.ExitFindings || f == nil || f.Address != ip || !f.Releasable || !strings.Contains(rep.Liveness, "node1") {
		t.Fatalf("exit %d, liveness %q, findings %+v; want a leak of %s judged on node1", code, rep.Liveness, rep.Findings, ip)
	}
}

func TestConfRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string { return testbed.NodeFile(t, dir, name, content) }
	tests := []struct {
		name, conf, why string
	}{
		{"kubernetes datastore without an API server", write("kdd.conflist", `{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}}]}`), "the kubernetes datastore needs the API server"},
		{"kubernetes datastore with an unreadable kubeconfig", write("kddkc.conflist", `{"name":"n","cniVersion":"1.0.0","plugins":[{"type":"calico","nodename":"node1","kubernetes":{"kubeconfig":"/nonexistent/kc"},"ipam":{"type":"calico-ipam"}}]}`), "/nonexistent/kc"},
		{"missing file", filepath.Join(dir, "none.conflist"), "none.conflist"},
		{"not JSON", write("bad.conflist", `{"name":`), "bad.conflist"},
	}
	t.Setenv("KUBECONFIG", "") // calico-ipam's fallback must not reach a real cluster here
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runCmd([]string{"--conf", tt.conf, "--cni-cache="}, &stdout, &stderr, false)
			if code != audit.ExitError || !strings.Contains(stderr.String(), tt.why) {
				t.Fatalf("exit %d, stderr %q; want exit 2 saying %q", code, stderr.String(), tt.why)
			}
		})
	}
}
