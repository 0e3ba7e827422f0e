package detect_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	admindetect "github.com/safe-ipam/safe-ipam/ipam/admin/detect"
)

// safe-ipam detect, once, on Calico's Kubernetes datastore: a cluster of
// no pod at all is unknown (exit 2: the check's own pod would be one); a
// clean one exits 0, saying gone-owner needs --every; two running pods on
// two nodes with one address are a finding (exit 1); an identity the API
// server refuses the pods makes the kinds unknown (exit 2), never clean.
func TestDetectOnce(t *testing.T) {
	srv := kubetest.Start(t)
	if err := srv.Apply(calicodata.Require(t, calicodata.CRDs)); err != nil {
		t.Fatal(err)
	}
	run := func(kubeconfig string) (int, string) {
		var out, errOut bytes.Buffer
		code := admindetect.Run([]string{"--datastore", "kubernetes", "--kubeconfig", kubeconfig}, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := run(srv.Kubeconfig); code != 2 || !strings.Contains(out, "lists no pod at all") {
		t.Fatalf("a cluster of no pod: exit %d, want 2\n%s", code, out)
	}
	if _, err := srv.RunPod("kube-system", "detect", "n1", "10.0.0.9"); err != nil {
		t.Fatal(err)
	}
	if code, out := run(srv.Kubeconfig); code != 0 || !strings.Contains(out, "gone-owner not judged") {
		t.Fatalf("a clean cluster: exit %d\n%s", code, out)
	}
	for _, p := range []struct{ name, node string }{{"a", "n1"}, {"b", "n2"}} {
		if _, err := srv.RunPod("default", p.name, p.node, "10.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	code, out := run(srv.Kubeconfig)
	if code != 1 || !strings.Contains(out, "shared-address 10.0.0.1 [default/a default/b]") {
		t.Fatalf("two pods with one address: exit %d, want 1\n%s", code, out)
	}
	nobody, err := srv.User("detect-nobody", "")
	if err != nil {
		t.Fatal(err)
	}
	if code, out := run(nobody); code != 2 || !strings.Contains(out, "shared-address unknown") {
		t.Fatalf("an identity refused the pods: exit %d, want 2 and the kinds unknown\n%s", code, out)
	}
}
