package claims_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

const crd = "../../../deploy/safe-ipam-claims.yaml"

// The file store is the node store the claims wrap (claims.Wrap asserts
// it at run time; this, when built).
var _ claims.Local = (*filestore.Store)(nil)

// Every name is one the API server takes, and two addresses or networks
// never share one.
func TestNames(t *testing.T) {
	seen := map[string]string{}
	for _, tt := range []struct{ network, addr string }{
		{"k8s-pod-network", "10.244.0.5"},
		{"k8s-pod-network", "10.244.0.50"},
		{"k8s-pod-network", "fd00::5"},
		{"k8s-pod-network", "::ffff:10.244.0.5"},
		{"K8s_Pod.Network", "10.244.0.5"},
		{"k8s-pod-network2", "10.244.0.5"},
		{"a-network-name-far-longer-than-the-sixty-three-characters-of-a-dns-label", "fd00:1:2:3:4:5:6:7"},
	} {
		name := claims.Name(tt.network, netip.MustParseAddr(tt.addr))
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("Name(%s, %s) = %q: %v", tt.network, tt.addr, name, errs)
		}
		key := tt.network + " " + netip.MustParseAddr(tt.addr).Unmap().String()
		if other, dup := seen[name]; dup && other != key {
			t.Errorf("%s and %s share the name %s", other, key, name)
		}
		seen[name] = key
	}
}

// node is one node's store with claims, over the shared API server.
type node struct {
	*claims.Store
	warned []error
}

func newNode(t *testing.T, api claims.API, name string) *node {
	t.Helper()
	return newMachine(t, api, name, "")
}

// newMachine is newNode on host: two machines may share a node name.
func newMachine(t *testing.T, api claims.API, name, host string) *node {
	t.Helper()
	fs, err := filestore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := &node{}
	n.Store = &claims.Store{Local: fs, Claims: claims.NewClient(api), Node: name, Host: host,
		Warn:      func(_ string, err error) { n.warned = append(n.warned, err) },
		MayForget: func(cl *claims.Claim, rec *record.Record) bool { return n.judge(cl, rec, 0) }}
	return n
}

// judge is the rulebook's Claim, as the CNI binary asks it, with the
// claim aged by later (the API server stamps a claim's creation: a test
// cannot make an old one).
func (n *node) judge(cl *claims.Claim, rec *record.Record, later time.Duration) bool {
	return rulebook.Claim(rulebook.ClaimCase{Node: cl.Node, Host: cl.Host, Self: n.Node, SelfHost: n.Host,
		Addr: cl.Addr, Record: rec, Age: time.Since(cl.Created) + later}).Release
}

// add commits a record of container on n with addr, as an ADD does: a
// pending record, then the commit. It returns the committed record, or
// the pending one and the commit's error.
func (n *node) add(t *testing.T, container, addr string) (*record.Record, error) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	att := record.Attachment{Network: "k8s-pod-network", ContainerID: container, IfName: "eth0"}
	pending, err := n.Swap(ctx, att, nil, &record.Record{Attachment: att, Node: n.Node, Host: n.Host, Handle: "k8s-pod-network." + container,
		PodNamespace: "default", PodName: "pod-" + container, State: record.Pending, Created: now, Updated: now})
	if err != nil {
		t.Fatalf("pending record of %s: %v", container, err)
	}
	committed := *pending
	committed.State, committed.IPs = record.Committed, []string{addr + "/32"}
	out, err := n.Commit(ctx, pending, &committed)
	if err != nil {
		return pending, err
	}
	return out, nil
}

func apiServer(t *testing.T, withCRD bool) (*kubetest.Server, *kubeapi.Client) {
	t.Helper()
	srv := kubetest.Start(t)
	if withCRD {
		if err := srv.Apply(crd); err != nil {
			t.Fatal(err)
		}
	}
	api, err := kubeapi.New(srv.Kubeconfig, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return srv, api
}

// The three-node story of issue 45 on one API server: an address freed
// behind node1's pod and handed to node2 is fenced there, quarantined
// for node1's claim, and free again once node1's DEL released it.
func TestAnotherNodesClaimFences(t *testing.T) {
	_, api := apiServer(t, true)
	ctx := context.Background()
	node1, node2 := newNode(t, api, "node1"), newNode(t, api, "node2")
	holder, err := node1.add(t, "aaa", "10.244.0.5")
	if err != nil {
		t.Fatal(err)
	}
	pending, err := node2.add(t, "bbb", "10.244.0.5")
	var held *store.HeldError
	// The address as the record writes it, as the other stores name it
	// (the fence's message, which the kubelet's event shows).
	if !errors.As(err, &held) || held.Holder.Attachment != holder.Attachment || held.Holder.Node != "node1" || held.Addr != "10.244.0.5/32" {
		t.Fatalf("node2's commit of node1's address: %v; want a HeldError of 10.244.0.5/32 naming node1's %s", err, holder.Attachment)
	}
	if err := node2.Quarantine(ctx, pending, held.Holder, record.Quarantine{Attachment: pending.Attachment, IPs: []string{"10.244.0.5/32"}}); err != nil {
		t.Fatalf("Quarantine for node1's holder: %v", err)
	}
	if _, err := node2.Swap(ctx, pending.Attachment, nil, pending); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("the quarantined attachment's retry: %v; want ErrQuarantined", err)
	}
	if _, err := node2.MarkReleasing(ctx, &record.Record{Attachment: pending.Attachment, Node: "node2"}); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("the quarantined attachment's DEL: %v; want ErrQuarantined (its allocation stays)", err)
	}
	// node1's pod goes: its DEL's mark releases the claim.
	if _, err := node1.MarkReleasing(ctx, &record.Record{Attachment: holder.Attachment, Node: "node1", State: record.Releasing}); err != nil {
		t.Fatal(err)
	}
	if cl, err := node1.Claims.Get(ctx, "k8s-pod-network", netip.MustParseAddr("10.244.0.5")); err != nil || cl != nil {
		t.Fatalf("after node1's DEL the claim is %+v, %v; want none", cl, err)
	}
	if _, err := node2.add(t, "ccc", "10.244.0.5"); err != nil {
		t.Fatalf("a new sandbox on node2 given the address after node1's DEL: %v", err)
	}
	if len(node1.warned)+len(node2.warned) > 0 {
		t.Fatalf("warnings: %v %v", node1.warned, node2.warned)
	}
}

// A claim of this node whose record does not hold the address (a crash
// between the claim and the commit) is taken over once the rulebook lets
// it go (older than the grace, no ADD of it running); before, or while
// its ADD runs (a second ADD on the node given the same address), the
// commit is fenced. Another node's claim of the same kind is never taken
// over: only its node can tell.
func TestOwnStaleClaimIsTakenOver(t *testing.T) {
	_, api := apiServer(t, true)
	ctx := context.Background()
	node1, node2 := newNode(t, api, "node1"), newNode(t, api, "node2")
	stale := func(n *node, container, addr string) {
		rec := &record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: container, IfName: "eth0"}, Node: n.Node}
		if _, err := n.Claims.Claim(ctx, rec, netip.MustParseAddr(addr)); err != nil {
			t.Fatal(err)
		}
	}
	var held *store.HeldError
	stale(node1, "crashed", "10.244.0.7")
	if _, err := node1.add(t, "early", "10.244.0.7"); !errors.As(err, &held) || held.Holder.ContainerID != "crashed" {
		t.Fatalf("node1's commit over its own claim made just now: %v; want a HeldError (C4: its commit may be on its way)", err)
	}
	node1.MayForget = func(cl *claims.Claim, rec *record.Record) bool { return node1.judge(cl, rec, 2*rulebook.ClaimGrace) }
	if _, err := node1.add(t, "next", "10.244.0.7"); err != nil {
		t.Fatalf("node1's commit over its own stale claim, past the grace: %v", err)
	}
	// A second ADD on the node given an address the first has claimed
	// and not yet committed: the first's claim stays.
	first, err := node1.Swap(ctx, record.Attachment{Network: "k8s-pod-network", ContainerID: "first", IfName: "eth0"}, nil,
		&record.Record{Attachment: record.Attachment{Network: "k8s-pod-network", ContainerID: "first", IfName: "eth0"}, Node: "node1",
			State: record.Pending, Owner: record.Self(), Created: time.Now(), Updated: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node1.Claims.Claim(ctx, first, netip.MustParseAddr("10.244.0.11")); err != nil {
		t.Fatal(err)
	}
	if _, err := node1.add(t, "second", "10.244.0.11"); !errors.As(err, &held) || held.Holder.ContainerID != "first" {
		t.Fatalf("a second ADD over the running first's claim: %v; want a HeldError naming the first", err)
	}
	if cl, err := node1.Claims.Get(ctx, "k8s-pod-network", netip.MustParseAddr("10.244.0.11")); err != nil || cl == nil || !cl.Names(first) {
		t.Fatalf("the first ADD's claim: %+v, %v; want it kept", cl, err)
	}
	stale(node2, "crashed2", "10.244.0.8")
	if _, err := node1.add(t, "other", "10.244.0.8"); !errors.As(err, &held) {
		t.Fatalf("node1's commit over node2's claim: %v; want a HeldError", err)
	}
	// Two machines under one node name (a stale nodename): each store
	// holds its own records only, so the other's claim is held.
	m1, m2 := newMachine(t, api, "shared", "m1"), newMachine(t, api, "shared", "m2")
	if _, err := m1.add(t, "on-m1", "10.244.0.9"); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.add(t, "on-m2", "10.244.0.9"); !errors.As(err, &held) || held.Holder.Host != "m1" {
		t.Fatalf("m2's commit over m1's claim under one node name: %v; want a HeldError naming m1's record", err)
	}
}

// The same commit again (a reindex, a replay) finds its own claim; a
// commit the node's store refuses releases the claims it made.
func TestCommitOwnsItsClaims(t *testing.T) {
	_, api := apiServer(t, true)
	ctx := context.Background()
	node1 := newNode(t, api, "node1")
	rec, err := node1.add(t, "aaa", "10.244.0.9")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node1.Commit(ctx, rec, rec); err != nil {
		t.Fatalf("re-committing over itself: %v", err)
	}
	// A stale pending: the node's store refuses, and the claim goes.
	stalePending := *rec
	stalePending.Revision--
	other := *rec
	other.IPs = []string{"10.244.0.10/32"}
	if _, err := node1.Commit(ctx, &stalePending, &other); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a commit over a stale pending: %v; want ErrConflict", err)
	}
	if cl, err := node1.Claims.Get(ctx, "k8s-pod-network", netip.MustParseAddr("10.244.0.10")); err != nil || cl != nil {
		t.Fatalf("the refused commit's claim: %+v, %v; want released", cl, err)
	}
	if cl, err := node1.Claims.Get(ctx, "k8s-pod-network", netip.MustParseAddr("10.244.0.9")); err != nil || cl == nil || !cl.Names(rec) {
		t.Fatalf("the record's claim: %+v, %v", cl, err)
	}
}

// Without the CRD the node commits as before and says why.
func TestCommitWithoutClaimsWhereNotServed(t *testing.T) {
	_, api := apiServer(t, false)
	node1 := newNode(t, api, "node1")
	if _, err := node1.add(t, "aaa", "10.244.0.5"); err != nil {
		t.Fatalf("commit without the CRD: %v", err)
	}
	if len(node1.warned) != 1 || !errors.Is(node1.warned[0], claims.ErrNotServed) {
		t.Fatalf("warnings %v; want one ErrNotServed", node1.warned)
	}
}

// deploy/safe-ipam-claims.yaml's role is enough for every verb, and
// without it no claim is made and the node commits as before.
func TestTheClaimsRoleIsEnough(t *testing.T) {
	srv, _ := apiServer(t, true)
	ctx := context.Background()
	for _, tt := range []struct {
		user, role string
		served     bool
	}{
		{"calico-cni", "safe-ipam-claims", true},
		{"stranger", "", false},
	} {
		kc, err := srv.User(tt.user, tt.role)
		if err != nil {
			t.Fatal(err)
		}
		api, err := kubeapi.New(kc, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		n := newNode(t, api, "node-"+tt.user)
		rec, err := n.add(t, "c-"+tt.user, "10.244.1.5")
		if err != nil {
			t.Fatalf("%s: commit: %v", tt.user, err)
		}
		own, _, err := n.OwnClaims(ctx, "k8s-pod-network")
		if !tt.served {
			if !errors.Is(err, claims.ErrNotServed) || len(n.warned) != 1 || !errors.Is(n.warned[0], claims.ErrNotServed) {
				t.Fatalf("%s: listing %v, warnings %v; want ErrNotServed", tt.user, err, n.warned)
			}
			continue
		}
		if err != nil || len(own) != 1 || !own[0].Names(rec) {
			t.Fatalf("%s: its claims %v, %v", tt.user, own, err)
		}
		if _, err := n.MarkReleasing(ctx, &record.Record{Attachment: rec.Attachment, Node: n.Node}); err != nil {
			t.Fatal(err)
		}
		if own, _, err := n.OwnClaims(ctx, "k8s-pod-network"); err != nil || len(own) != 0 || len(n.warned) > 0 {
			t.Fatalf("%s: after the release: claims %v, %v, warnings %v", tt.user, own, err, n.warned)
		}
	}
}

// A claim that does not read (its spec does not match its name) is held
// by someone unknown: the commit fails without committing, keeping the
// claim, and the node's listing names it and goes on.
func TestDamagedClaimIsHeld(t *testing.T) {
	_, api := apiServer(t, true)
	ctx := context.Background()
	node1 := newNode(t, api, "node1")
	addr := netip.MustParseAddr("10.244.0.5")
	damaged := map[string]any{"apiVersion": claims.Group + "/" + claims.Version, "kind": claims.Kind,
		"metadata": map[string]any{"name": claims.Name("k8s-pod-network", addr), "labels": map[string]string{claims.NodeLabel: "node1"}},
		"spec":     map[string]any{"network": "k8s-pod-network", "address": "10.244.0.99", "node": "node1", "containerID": "x", "ifName": "eth0"}}
	if err := api.Create(ctx, claims.Collection, damaged, nil); err != nil {
		t.Fatal(err)
	}
	pending, err := node1.add(t, "aaa", addr.String())
	var held *store.HeldError
	if !errors.Is(err, store.ErrUnavailable) || errors.As(err, &held) {
		t.Fatalf("a commit over a damaged claim: %v; want a store error (held by someone unknown), no HeldError", err)
	}
	if cur, err := node1.Get(ctx, pending.Attachment); err != nil || cur == nil || cur.State != record.Pending {
		t.Fatalf("the record after the refused commit: %+v, %v; want it pending", cur, err)
	}
	own, bad, err := node1.OwnClaims(ctx, "k8s-pod-network")
	if err != nil || len(own) != 0 || len(bad) != 1 || bad[0] != claims.Name("k8s-pod-network", addr) {
		t.Fatalf("OwnClaims = %v, damaged %v, %v; want the damaged one named", own, bad, err)
	}
	if len(node1.warned) > 0 {
		t.Fatalf("warnings %v: a held address is no claim merely not made", node1.warned)
	}
}

// A holder the node's own index finds (a record this machine wrote under
// a former node name) is quarantined in the node's store, claims served
// or not: as before the claims.
func TestOwnStoreHolderIsQuarantinedLocally(t *testing.T) {
	_, api := apiServer(t, false)
	ctx := context.Background()
	node1 := newNode(t, api, "node1")
	now := time.Now().UTC()
	old := record.Attachment{Network: "k8s-pod-network", ContainerID: "old", IfName: "eth0"}
	p, err := node1.Local.Swap(ctx, old, nil, &record.Record{Attachment: old, Node: "node0", State: record.Pending, Created: now, Updated: now})
	if err != nil {
		t.Fatal(err)
	}
	c := *p
	c.State, c.IPs = record.Committed, []string{"10.244.0.5/32"}
	if _, err := node1.Local.Commit(ctx, p, &c); err != nil {
		t.Fatal(err)
	}
	pending, err := node1.add(t, "new", "10.244.0.5")
	var held *store.HeldError
	if !errors.As(err, &held) || held.Holder.Node != "node0" {
		t.Fatalf("commit over the former name's record: %v; want a HeldError naming it", err)
	}
	if err := node1.Quarantine(ctx, pending, held.Holder, record.Quarantine{Attachment: pending.Attachment, IPs: pending.IPs}); err != nil {
		t.Fatalf("Quarantine for this machine's own record under its former name: %v", err)
	}
	if _, err := node1.Swap(ctx, pending.Attachment, nil, pending); !errors.Is(err, store.ErrQuarantined) {
		t.Fatalf("the quarantined attachment's retry: %v; want ErrQuarantined", err)
	}
}

// A node that found no claims served makes none on ADD and DEL for a
// while (each would pay a refused request), says so in its cache dir,
// and claims again once the note is old: the CRD applied meanwhile takes
// effect. gc's rounds try whatever the note says.
func TestNotServedIsRememberedForAWhile(t *testing.T) {
	srv, _ := apiServer(t, false)
	cacheDir, records := t.TempDir(), t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"calico","datastore_type":"kubernetes",
		"kubernetes":{"kubeconfig":%q},"nodename":"node1","ipam":{"type":"safe-ipam","cacheDir":%q,"store":{"type":"file","dir":%q}}}`, srv.Kubeconfig, cacheDir, records)))
	if err != nil {
		t.Fatal(err)
	}
	open := func() store.Store {
		t.Helper()
		fs, err := filestore.Open(records)
		if err != nil {
			t.Fatal(err)
		}
		return claims.ForConfig(cfg, fs, "node1", claims.Options{Hot: true})
	}
	wrapped := func(st store.Store) bool { _, ok := st.(*claims.Store); return ok }
	st := open()
	if !wrapped(st) {
		t.Fatal("no note yet: the store should try the claims")
	}
	n := &node{Store: st.(*claims.Store)}
	if _, err := n.add(t, "aaa", "10.244.0.5"); err != nil {
		t.Fatal(err)
	}
	if wrapped(open()) {
		t.Fatal("claims just found not served: the next ADD or DEL should not try them")
	}
	fs, err := filestore.Open(records)
	if err != nil {
		t.Fatal(err)
	}
	gc := claims.ForConfig(cfg, fs, "node1", claims.Options{})
	if !wrapped(gc) {
		t.Fatal("gc's round should try the claims whatever the note says")
	}
	if err := srv.Apply(crd); err != nil {
		t.Fatal(err)
	}
	// gc's round finds them served: the ADDs and DELs claim again at once.
	if _, _, err := gc.(*claims.Store).OwnClaims(context.Background(), "k8s-pod-network"); err != nil {
		t.Fatal(err)
	}
	if !wrapped(open()) {
		t.Fatal("gc found the claims served: the next ADD or DEL should try them")
	}
	noteNow := time.Now().UTC().Format(time.RFC3339Nano)
	if err := os.WriteFile(filepath.Join(cacheDir, "claims-not-served"), []byte(noteNow), 0o600); err != nil {
		t.Fatal(err)
	}
	if wrapped(open()) {
		t.Fatal("a note of now: the next ADD or DEL should not try them")
	}
	old := time.Now().Add(-6 * time.Minute).UTC().Format(time.RFC3339Nano)
	if err := os.WriteFile(filepath.Join(cacheDir, "claims-not-served"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := open(); !wrapped(st) {
		t.Fatal("a note older than its while: the store should try the claims again")
	}
}

// An ADD killed between its claims and its commit leaves its record
// pending (naming no address) and its claims standing. Whatever settles
// that record releases them, before the address goes back to Calico: the
// DEL's mark, the retried ADD's takeover, the GC's mark. A pending record
// whose ADD still runs keeps them (its own commit, or its failure,
// settles them).
func TestAnUnfinishedADDsClaimsAreReleased(t *testing.T) {
	_, api := apiServer(t, true)
	ctx := context.Background()
	n := newNode(t, api, "node1")
	unfinished := func(container, addr string, owner *record.Owner) *record.Record {
		t.Helper()
		att := record.Attachment{Network: "k8s-pod-network", ContainerID: container, IfName: "eth0"}
		now := time.Now().UTC()
		pending, err := n.Swap(ctx, att, nil, &record.Record{Attachment: att, Node: n.Node, Handle: "k8s-pod-network." + container,
			State: record.Pending, Owner: owner, Created: now, Updated: now})
		if err != nil {
			t.Fatal(err)
		}
		committed := *pending
		committed.State, committed.IPs = record.Committed, []string{addr + "/32"}
		if _, err := n.Claims.Claim(ctx, &committed, netip.MustParseAddr(addr)); err != nil {
			t.Fatal(err)
		}
		return pending
	}
	claimed := func(addr string) bool {
		t.Helper()
		cl, err := n.Claims.Get(ctx, "k8s-pod-network", netip.MustParseAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		return cl != nil
	}
	dead := &record.Owner{PID: 1 << 30, Start: 1, Boot: "gone"}
	now := time.Now().UTC()

	// The runtime's DEL marks it.
	p := unfinished("del", "10.244.1.1", dead)
	if _, err := n.MarkReleasing(ctx, &record.Record{Attachment: p.Attachment, Node: n.Node, Created: now, Updated: now}); err != nil {
		t.Fatal(err)
	}
	if claimed("10.244.1.1") {
		t.Error("the DEL of an ADD killed after its claim left the claim standing")
	}
	// The retried ADD takes it over.
	p = unfinished("retry", "10.244.1.2", dead)
	next := *p
	next.Owner, next.Updated = record.Self(), now
	if _, err := n.Swap(ctx, p.Attachment, p, &next); err != nil {
		t.Fatal(err)
	}
	if claimed("10.244.1.2") {
		t.Error("the ADD retried over one killed after its claim left the old claim standing")
	}
	// The GC marks it.
	p = unfinished("gc", "10.244.1.3", dead)
	if _, err := n.Swap(ctx, p.Attachment, p, store.Releasing(p, now)); err != nil {
		t.Fatal(err)
	}
	if claimed("10.244.1.3") {
		t.Error("the GC of an ADD killed after its claim left the claim standing")
	}
	// A DEL cut short between its mark and its claims' release: the GC's
	// mark over the releasing record releases them.
	rec, err := n.add(t, "cut", "10.244.1.4")
	if err != nil {
		t.Fatal(err)
	}
	marked, err := n.Local.MarkReleasing(ctx, &record.Record{Attachment: rec.Attachment, Node: n.Node, Owner: dead, Created: now, Updated: now})
	if err != nil || !claimed("10.244.1.4") {
		t.Fatalf("a mark in the node's store alone: %v; the claim must still stand", err)
	}
	if _, err := n.Swap(ctx, marked.Attachment, marked, store.Releasing(marked, now)); err != nil {
		t.Fatal(err)
	}
	if claimed("10.244.1.4") {
		t.Error("the GC over a DEL cut short after its mark left the claim standing")
	}
	// The DEL's mark of a killed ADD's record whose claims' release failed
	// (the API server was away): the retried DEL finds a releasing record
	// that names no address, and releases them.
	p = unfinished("marked", "10.244.1.6", dead)
	marked, err = n.Local.MarkReleasing(ctx, &record.Record{Attachment: p.Attachment, Node: n.Node, Owner: dead, Created: now, Updated: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.MarkReleasing(ctx, &record.Record{Attachment: marked.Attachment, Node: n.Node, Created: now, Updated: now}); err != nil {
		t.Fatal(err)
	}
	if claimed("10.244.1.6") {
		t.Error("the DEL retried over the mark of an ADD killed after its claim left the claim standing")
	}
	// An ADD that still runs keeps its claim when its own call replaces
	// its pending record (as it does when its delegate's release failed).
	p = unfinished("running", "10.244.1.5", record.Self())
	kept := *p
	kept.Owner = nil
	if _, err := n.Swap(ctx, p.Attachment, p, &kept); err != nil {
		t.Fatal(err)
	}
	if !claimed("10.244.1.5") {
		t.Error("a pending record of a running ADD replaced by its own call released the claim its commit may still need")
	}
}

// A node renamed (Calico's nodename changed), or its machine's host
// name, under a running pod: the pod's DEL marks its record under the new
// name, but the record's claims were made under the former one, and they
// are released all the same: kept, they would fence the address on every
// node once Calico frees it, until the dead-node sweep found the former
// name gone (or for ever, for a host name). Another attachment's claim
// stays.
func TestADELAfterARenameReleasesTheClaims(t *testing.T) {
	_, api := apiServer(t, true)
	ctx := context.Background()
	for i, renamed := range [][2]string{{"node-new", "host1"}, {"node-old", "host2"}} {
		before := newMachine(t, api, "node-old", "host1")
		addr := fmt.Sprintf("10.244.2.%d", 7+i)
		rec, err := before.add(t, fmt.Sprintf("c%d", i), addr)
		if err != nil {
			t.Fatal(err)
		}
		after := &node{}
		after.Store = &claims.Store{Local: before.Local, Claims: claims.NewClient(api), Node: renamed[0], Host: renamed[1],
			Warn: func(_ string, err error) { after.warned = append(after.warned, err) }}
		if _, err := after.MarkReleasing(ctx, &record.Record{Attachment: rec.Attachment, Node: after.Node, Host: after.Host}); err != nil {
			t.Fatal(err)
		}
		if cl, err := claims.NewClient(api).Get(ctx, rec.Network, netip.MustParseAddr(addr)); err != nil || cl != nil || len(after.warned) > 0 {
			t.Fatalf("after the DEL as %v: the claim %+v, %v, warnings %v; want it released", renamed, cl, err, after.warned)
		}
	}
}
