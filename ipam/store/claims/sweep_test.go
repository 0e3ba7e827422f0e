package claims_test

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// The dead-node sweeps elect one node through their Lease (which
// deploy/ creates), as the identity deploy/ binds (calico-node in
// kube-system): a node leads a Lease nobody holds, renews it, and another
// takes it over only once it has seen it unchanged for its duration; a
// leader that resigns gives it up at once; two processes under one node
// name are two campaigns. The notes of the nodes found gone pass their
// grace by the API server's clock; a leader that lost the lead notes
// nothing; a note that does not read is no sighting, and is dropped, never
// written back as one. Without the Lease nobody leads, and the error
// says so (TestClaimSweepLoopsElectOne: without AddressClaims served).
func TestSweepLease(t *testing.T) {
	srv, _ := apiServer(t, true)
	ctx := context.Background()
	kc, err := srv.User("calico-node", "")
	if err != nil {
		t.Fatal(err)
	}
	api, err := kubeapi.New(kc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := claims.NewClient(api)
	const network, ttl = "k8s-pod-network", 2 * time.Second
	cp1, cp2 := &claims.Campaign{Self: "node1"}, &claims.Campaign{Self: "node2"}
	lead := func(cp *claims.Campaign, campaign bool, want string) {
		t.Helper()
		var sw *claims.Sweep
		var err error
		// deploy/'s binding reaches the authorizer's cache a moment later.
		for try := 0; try < 100; try++ {
			// Refused: the bindings are not in the authorizer yet.
			if sw, err = c.Lead(ctx, network, cp, ttl, campaign); !errors.Is(err, claims.ErrClaimsOff) && !errors.Is(err, kubeapi.ErrForbidden) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil || sw.Leader != want {
			t.Fatalf("%s (campaign %v) finds %+v, %v; want %s leading", cp.Self, campaign, sw, err, want)
		}
	}
	lead(cp2, false, "")     // nobody holds it; a node not campaigning takes none
	lead(cp1, true, "node1") // takes it
	lead(cp2, true, "node1") // sees it first now
	lead(cp1, true, "node1") // renews
	lead(cp2, true, "node1") // sees the renewal: not expired
	time.Sleep(ttl + 500*time.Millisecond)
	lead(cp2, true, "node2") // unchanged for its duration: taken over
	lead(cp1, true, "node2") // node1 sees the new holder
	if err := c.Resign(ctx, network, cp2); err != nil {
		t.Fatal(err)
	}
	lead(cp1, true, "node1") // given up: taken at once
	twin := &claims.Campaign{Self: "node1"}
	if sw, err := c.Lead(ctx, network, twin, ttl, true); err != nil || sw.Leader != "node1" || sw.Leading {
		t.Fatalf("a second process under node1's name: %+v, %v; want node1's other process leading, not it", sw, err)
	}

	sw, err := c.Lead(ctx, network, nil, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Note(ctx, sw, map[string]bool{"node9": true}, time.Second); err != nil {
		t.Fatal(err)
	}
	if s, ok := sw.Gone["node9"]; !ok || s.Passed {
		t.Fatalf("after the note: %+v; want node9 noted, its grace not passed", sw.Gone)
	}
	if err := c.Resign(ctx, network, cp1); err != nil {
		t.Fatal(err)
	}
	if err := c.Note(ctx, sw, map[string]bool{"node8": true}, time.Second); !errors.Is(err, claims.ErrLeadChanged) {
		t.Fatalf("a note of a sweep whose leader lost the lead: %v; want it refused", err)
	}
	lead(cp1, true, "node1")
	if sw, err = c.Lead(ctx, network, nil, 0, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // more than the grace and the Date's second
	if sw, err = c.Lead(ctx, network, nil, 0, false); err != nil || !sw.Gone["node9"].Passed || len(sw.Gone) != 1 {
		t.Fatalf("a grace later: %+v, %v; want node9 alone, its grace passed", sw.Gone, err)
	}
	if err := c.Note(ctx, sw, map[string]bool{"node9": false}, time.Second); err != nil {
		t.Fatal(err)
	}
	if sw, err = c.Lead(ctx, network, nil, 0, false); err != nil || len(sw.Gone) != 0 {
		t.Fatalf("after forgetting node9: %+v, %v", sw.Gone, err)
	}

	leases := srv.Client().CoordinationV1().Leases(claims.LeaseNamespace)
	l, err := leases.Get(ctx, claims.LeaseName(network), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[claims.Group+"/gone"] = `{"node7":{"since":"2025-01-01T00:00:00Z","grace":"ten minutes"},"node6":{"since":"2025-01-01T00:00:00Z","grace":"-1h"}}`
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if sw, err = c.Lead(ctx, network, nil, 0, false); err != nil || sw.Gone["node7"].Passed || !sw.Gone["node7"].Legacy || sw.Gone["node6"].Passed || !sw.Gone["node6"].Legacy {
		t.Fatalf("notes that do not read: %+v, %v; want no sighting", sw.Gone, err)
	}
	if err := c.Note(ctx, sw, map[string]bool{"node5": true}, time.Second); err != nil {
		t.Fatal(err)
	}
	if sw, err = c.Lead(ctx, network, nil, 0, false); err != nil || len(sw.Gone) != 1 || sw.Gone["node5"].Legacy {
		t.Fatalf("after noting node5 over notes that do not read: %+v, %v; want node5's alone", sw.Gone, err)
	}

	if err := leases.Delete(ctx, claims.LeaseName(network), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lead(ctx, network, cp1, ttl, true); !errors.Is(err, claims.ErrNoLease) {
		t.Fatalf("claims served, the Lease deleted: %v; want ErrNoLease", err)
	}
}
