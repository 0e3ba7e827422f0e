package calicosim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// TestKDDMissingParts adds the parts calico-ipam needs one at a time, on
// an apiserver of its own (CRDs are cluster-wide), and checks each ADD
// fails with calico-ipam's error until the next part is there (KDD.md).
func TestKDDMissingParts(t *testing.T) {
	crds := calicodata.Require(t, calicodata.CRDs)
	srv := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn, err := newDynamic(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	k := &kdd{t: t, cfg: srv.Config(), dyn: dyn, kubeconfig: srv.Kubeconfig, ctx: ctx}
	install := func(plural string) func() error {
		return func() error { return InstallKubeCRDs(ctx, k.cfg, crdFile(t, crds, plural)) }
	}
	web := pod{"aaa111", "default", "web-0"}
	steps := []struct {
		name    string
		pod     pod
		want    string
		addPart func() error
	}{
		{"namespace", pod{"aaa111", "nosuch", "web-0"}, `failed to get namespace nosuch: namespaces "nosuch" not found`, nil},
		{"node", web, `resource does not exist: Node(node1) with error: nodes "node1" not found`,
			func() error { return SeedKubeNode(ctx, k.cfg, node1) }},
		{"ippools CRD", web, `cannot find a qualified ippool`, install("ippools")},
		{"ippool", web, `cannot find a qualified ippool`,
			func() error {
				return SeedKubeIPPool(ctx, k.cfg, replayPool.name, replayPool.cidr, replayPool.blockSize)
			}},
		{"blockaffinities CRD", web, `resource does not exist: BlockAffinity(node1-10-244-166-128-26) with error: the server could not find the requested resource (post BlockAffinities.crd.projectcalico.org)`, install("blockaffinities")},
		{"ipamblocks CRD", web, `resource does not exist: IPAMBlock(10-244-166-128-26) with error: the server could not find the requested resource (post IPAMBlocks.crd.projectcalico.org)`, install("ipamblocks")},
		{"ipamhandles CRD", web, `resource does not exist: IPAMHandle(k8s-pod-network.aaa111) with error: the server could not find the requested resource (post IPAMHandles.crd.projectcalico.org)`, install("ipamhandles")},
	}
	waitNamespace(t, ctx, dyn, "default")
	for _, st := range steps {
		_, err := k.add(ModernHandles, st.pod, k.conf(nil))
		if err == nil || !strings.HasSuffix(err.Error(), st.want) {
			t.Fatalf("without the %s: ADD error %v, want one ending %q", st.name, err, st.want)
		}
		if st.name == "ipamblocks CRD" {
			wantPendingAffinity(t, k)
		}
		if st.addPart != nil {
			if err := st.addPart(); err != nil {
				t.Fatalf("adding the %s: %v", st.name, err)
			}
		}
	}
	if got := k.mustAdd(ModernHandles, web); got.String() != "10.244.166.128" {
		t.Errorf("ADD with every part present got %s", got)
	}
}

// wantPendingAffinity checks that an ADD that failed to create its block
// left the affinity pending, as calico-ipam does.
func wantPendingAffinity(t *testing.T, k *kdd) {
	t.Helper()
	if s := k.state(); len(s.Affinities) != 1 || s.Affinities[0].Affinity.State != calico.AffinityPending {
		t.Errorf("affinities after the failed ADD: %+v, want one pending", s.Affinities)
	}
}

// crdFile writes the one CRD of plural from the CRDs file to a file of
// its own.
func crdFile(t *testing.T, crds, plural string) string {
	t.Helper()
	data, err := os.ReadFile(crds)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		if bytes.Contains(doc, []byte("name: "+plural+".crd.projectcalico.org")) {
			path := filepath.Join(t.TempDir(), plural+".yaml")
			if err := os.WriteFile(path, doc, 0o644); err != nil {
				t.Fatal(err)
			}
			return path
		}
	}
	t.Fatalf("no CRD %s in %s", plural, crds)
	return ""
}
