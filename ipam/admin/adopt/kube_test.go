package adopt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/backends"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// kube is one real kube-apiserver for the package, started on first use.
var kube kubetest.Shared

func TestMain(m *testing.M) { kube.Main(m) }

// adopt reads Calico's Kubernetes datastore as it reads etcd: each cached
// attachment gets the handle that really holds its address there, and an
// address Calico has free is an early release.
func TestKubeAdoptReadsTheKubernetesDatastore(t *testing.T) {
	srv := backends.KubeServer(t, &kube)
	ds := backends.Kube(t, srv).Store
	cidr := netip.MustParsePrefix("10.244.166.128/26")
	b, err := calico.NewBlock(cidr, 1000)
	if err != nil {
		t.Fatal(err)
	}
	b.ClaimFor(node1, time.Now())
	for _, h := range []string{network + ".aaa111", "default.web-2"} {
		if _, err := b.Allocate(1, h, map[string]string{"node": node1}); err != nil {
			t.Fatal(err)
		}
		counts := calico.NewHandle()
		counts.Add(cidr, 1)
		if err := ds.Write(context.Background(), datastore.Change{Handle: &datastore.Handle{ID: h, Handle: counts}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ds.Write(context.Background(), datastore.Change{Blocks: []*datastore.Block{{Block: b}}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cache := filepath.Join(dir, "results")
	confJSON := fmt.Sprintf(`{"type":"calico","datastore_type":"kubernetes","kubernetes":{"kubeconfig":%q},"nodename":%q,
		"ipam":{"type":"safe-ipam","delegate":{"type":"calico-ipam"},"store":{"type":"file","dir":%q}}}`, srv.Kubeconfig, node1, filepath.Join(dir, "records"))
	conf := filepath.Join(dir, "10-calico.conflist")
	writeFile(t, conf, fmt.Sprintf(`{"name":%q,"cniVersion":"1.0.0","plugins":[%s]}`, network, confJSON))
	pods := []struct{ cid, pod, ip string }{{"aaa111", "web-0", "10.244.166.128"}, {"ccc333", "web-2", "10.244.166.129"}, {"ddd444", "web-4", "10.244.166.140"}}
	for _, p := range pods {
		writeFile(t, filepath.Join(cache, network+"-"+p.cid+"-eth0"), cacheJSON(t, p.cid, p.pod, p.ip, confJSON))
	}
	var stdout, stderr bytes.Buffer
	code := Run([]string{"--conf", conf, "--json", "--cni-cache", cache}, &stdout, &stderr)
	var plan Plan
	if err := json.Unmarshal(stdout.Bytes(), &plan); err != nil {
		t.Fatalf("exit %d: %v\n%s", code, err, stderr.String())
	}
	got := byAttachment(&plan)
	want := map[string][2]string{"aaa111": {KindAdopt, network + ".aaa111"}, "ccc333": {KindAdopt, "default.web-2"}, "ddd444": {KindEarlyRelease, network + ".ddd444"}}
	for cid, w := range want {
		if a := got[attName(cid)]; a.Kind != w[0] || a.Handle != w[1] {
			t.Errorf("%s: %s under %s; want %s under %s", cid, a.Kind, a.Handle, w[0], w[1])
		}
	}
	if code != 1 || len(plan.Actions) != 3 {
		t.Errorf("exit %d, %d actions; want 1 (a dry run with records to write), 3", code, len(plan.Actions))
	}
	// With the claims served, the records adopt writes claim their
	// addresses cluster-wide as an ADD's commit does (issue 45): another
	// node's ADD given one of them is fenced.
	if err := srv.Apply("../../../deploy/safe-ipam-claims.yaml"); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := Run([]string{"--conf", conf, "--cni-cache", cache, "--apply"}, &stdout, &stderr); code != 1 {
		t.Fatalf("adopt --apply: exit %d, want 1 (an early release)\n%s\n%s", code, stdout.String(), stderr.String())
	}
	api, err := kubeapi.New(srv.Kubeconfig, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	made, _, err := claims.NewClient(api).OfNode(context.Background(), network, node1)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, cl := range made {
		addrs = append(addrs, cl.Addr.String()+" "+cl.Holder.ContainerID)
	}
	slices.Sort(addrs)
	if want := []string{"10.244.166.128 aaa111", "10.244.166.129 ccc333", "10.244.166.140 ddd444"}; !slices.Equal(addrs, want) {
		t.Errorf("AddressClaims after adopt --apply: %v; want %v", addrs, want)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// cacheJSON is libcni's cache entry of a pod, as containerd leaves it.
func cacheJSON(t *testing.T, cid, pod, ip, conf string) string {
	t.Helper()
	entry := map[string]any{
		"kind": "cniCacheV1", "containerId": cid, "config": []byte(conf), "ifName": "eth0", "networkName": network,
		"cniArgs": [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", pod},
			{"K8S_POD_INFRA_CONTAINER_ID", cid}, {"K8S_POD_UID", "uid-" + pod}},
		"result": json.RawMessage(fmt.Sprintf(`{"cniVersion":"1.0.0","ips":[{"address":"%s/26"}]}`, ip)),
	}
	data, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
