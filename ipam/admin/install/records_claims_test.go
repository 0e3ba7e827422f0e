package install

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 45, owners: once uninstall has forgotten a network's records, a
// claim of this machine that no record holds does not outlive it (gc,
// which settles such claims, goes with safe-ipam): uninstall forgets it
// by the rulebook, and one the rulebook keeps (under a minute old: an
// ADD's commit may be on its way) fails uninstall, which is run again.
func TestUninstallLeavesNoClaimOfThisMachine(t *testing.T) {
	srv := kubetest.Start(t)
	if err := srv.Apply("../../../deploy/safe-ipam-claims.yaml"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// The delegate answers VERSION only: uninstall releases nothing here.
	version := "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.3.1\",\"0.4.0\",\"1.0.0\"]}'\n"
	if err := os.WriteFile(filepath.Join(bin, "calico-ipam"), []byte(version), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`{"name":"k8s-pod-network","cniVersion":"1.0.0","type":"calico","datastore_type":"kubernetes",
		"kubernetes":{"kubeconfig":%q},"nodename":"node1",
		"ipam":{"type":"safe-ipam","delegate":{"type":"calico-ipam"},"store":{"type":"file","dir":%q},"cacheDir":%q,"logFile":%q}}`,
		srv.Kubeconfig, filepath.Join(dir, "records"), filepath.Join(dir, "cache"), filepath.Join(dir, "safe-ipam.log"))))
	if err != nil {
		t.Fatal(err)
	}
	api, err := kubeapi.New(srv.Kubeconfig, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	orphan := &record.Record{Attachment: record.Attachment{Network: cfg.Network, ContainerID: "killed", IfName: "eth0"}, Node: "node1",
		Host: record.ThisHost(), Handle: cfg.Network + ".killed", State: record.Committed, IPs: []string{"10.244.4.1/32"}}
	if _, err := claims.NewClient(api).Claim(ctx, orphan, netip.MustParseAddr("10.244.4.1")); err != nil {
		t.Fatal(err)
	}
	_, _, err = forgetNetwork(ctx, cfg, filepath.Join(dir, "10-calico.conflist"), bin, false, false, nil)
	if err == nil || !strings.Contains(err.Error(), "claim(s) of this machine kept") {
		t.Fatalf("uninstall beside a claim of this machine under a minute old: %v; want it to fail, to be run again", err)
	}
	if cl, err := claims.NewClient(api).Get(ctx, cfg.Network, netip.MustParseAddr("10.244.4.1")); err != nil || cl == nil {
		t.Fatalf("the young claim: %v, %v; want it kept", cl, err)
	}
}
