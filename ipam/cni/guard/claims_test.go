package guard_test

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 45, owners: uninstall's last step on a network forgets every
// claim of this machine that no record holds (an ADD killed after its
// claim, a release that failed while the record was forgotten), else it
// would fence its address on every node for ever; another machine's
// claim under the node's name is that machine's to judge, and a claim
// the rulebook keeps (a committed record's, one under a minute old) fails
// it, to be run again.
func TestForgetOwnClaimsLeavesNoneOfThisMachine(t *testing.T) {
	srv := kubetest.Start(t)
	if err := srv.Apply("../../../deploy/safe-ipam-claims.yaml"); err != nil {
		t.Fatal(err)
	}
	api, err := kubeapi.New(srv.Kubeconfig, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fs, err := filestore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	client := claims.NewClient(api)
	cs := &claims.Store{Local: fs, Claims: client, Node: "node1", Host: record.ThisHost(), Warn: func(string, error) {}}
	g := guard.New(guard.Parts{Config: &config.Config{Network: "k8s-pod-network"}, Node: "node1", Store: cs, Log: slog.New(slog.DiscardHandler)})
	rec := func(cid, host, addr string) *record.Record {
		return &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: cid, IfName: "eth0"}, Node: "node1", Host: host,
			Handle: "k8s-pod-network." + cid, State: record.Committed, IPs: []string{addr + "/32"}, Created: time.Now().UTC()}
	}
	claim := func(r *record.Record) {
		t.Helper()
		if _, err := client.Claim(ctx, r, netip.MustParsePrefix(r.IPs[0]).Addr()); err != nil {
			t.Fatal(err)
		}
	}
	left := func() map[string]bool {
		t.Helper()
		own, _, err := client.OfNode(ctx, "k8s-pod-network", "node1")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, cl := range own {
			out[cl.Holder.ContainerID] = true
		}
		return out
	}
	claim(rec("killed", record.ThisHost(), "10.244.3.1")) // its ADD was killed after the claim
	claim(rec("theirs", "other-machine", "10.244.3.2"))
	held, err := cs.Commit(ctx, nil, rec("running", record.ThisHost(), "10.244.3.3"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.ForgetOwnClaims(ctx); err == nil || !left()["killed"] {
		t.Fatalf("claims under a minute old: forgotten (%v); want kept, and an error", err)
	}
	guard.SetClock(g, func() time.Time { return time.Now().Add(2 * time.Minute) })
	n, err := g.ForgetOwnClaims(ctx)
	if got := left(); err == nil || n != 1 || got["killed"] || !got["theirs"] || !got["running"] {
		t.Fatalf("with a committed record left: forgot %d (%v), left %v; want the killed ADD's forgotten, an error for the record's", n, err, got)
	}
	if _, err := cs.Swap(ctx, held.Attachment, held, nil); err != nil { // uninstall forgets it
		t.Fatal(err)
	}
	if n, err := g.ForgetOwnClaims(ctx); err != nil || n != 0 || !maps.Equal(left(), map[string]bool{"theirs": true}) {
		t.Fatalf("once the records are gone: forgot %d (%v), left %v; want only the other machine's", n, err, left())
	}
}
