package snapshot_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/snapshot"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// On Calico's Kubernetes datastore, a record repair forgets through the
// session (an orphan record) releases its AddressClaim as a DEL does
// (issue 45): kept, the claim would fence the address on every node until
// this node's gc found it.
func TestKubeRepairForgetReleasesTheClaims(t *testing.T) {
	srv := kubetest.Start(t)
	for _, manifest := range []string{calicodata.Require(t, calicodata.CRDs), "../../../deploy/safe-ipam-claims.yaml"} {
		if err := srv.Apply(manifest); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`{"name":"k8s-pod-network","cniVersion":"1.0.0","type":"calico","datastore_type":"kubernetes",
		"kubernetes":{"kubeconfig":%q},"nodename":"node1",
		"ipam":{"type":"safe-ipam","delegate":{"type":"calico-ipam"},"store":{"type":"file","dir":%q},"cacheDir":%q}}`,
		srv.Kubeconfig, filepath.Join(dir, "records"), filepath.Join(dir, "cache"))))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := filestore.Open(cfg.Store.Dir)
	if err != nil {
		t.Fatal(err)
	}
	st := invocation.Claimed(cfg, fs, "node1", slog.New(slog.DiscardHandler), false)
	att := record.Attachment{Network: cfg.Network, ContainerID: "gone", IfName: "eth0"}
	rec, err := st.Commit(ctx, nil, &record.Record{Attachment: att, Node: "node1", Host: record.ThisHost(), Handle: cfg.Network + ".gone",
		State: record.Committed, IPs: []string{"10.244.0.7/26"}, Created: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	api, err := kubeapi.New(srv.Kubeconfig, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr("10.244.0.7")
	if cl, err := claims.NewClient(api).Get(ctx, cfg.Network, addr); err != nil || cl == nil {
		t.Fatalf("the committed record's claim: %v, %v", cl, err)
	}
	s, err := snapshot.Open(ctx, snapshot.Where{Calico: datastore.Settings{Type: datastore.Kubernetes, Kubeconfig: srv.Kubeconfig},
		Network: cfg.Network, Node: "node1", StoreDir: cfg.Store.Dir, SafeIPAM: cfg, Conf: "10-calico.conflist", Writes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Records.Forget(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if cl, err := claims.NewClient(api).Get(ctx, cfg.Network, addr); err != nil || cl != nil {
		t.Errorf("the forgotten record's claim: %+v, %v; want it released with the record", cl, err)
	}
}
