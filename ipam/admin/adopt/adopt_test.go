package adopt

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// The pods on a node before safe-ipam: one from Calico 3.x (its own
// `<network>.<id>` handle), one from Calico 2.x (a pod-name handle), and
// web-0's newer sandbox, whose address the late Calico 2.x DEL of its
// older sandbox freed. Adopt plans each with the handle that really holds
// its addresses and reports the early release; --apply writes committed
// records; a second --apply changes nothing.
func TestAdoptRecordsWhatRuns(t *testing.T) {
	for _, storeType := range []string{config.StoreFile, config.StoreEtcd} {
		t.Run(storeType, func(t *testing.T) {
			w := newWorld(t, storeType)
			modern := w.start(calicosim.ModernHandles, "c-modern", "default", "app-0")
			legacy := w.start(calicosim.LegacyHandles, "c-legacy", "default", "db-0")
			old := w.start(calicosim.LegacyHandles, "c-web-old", "default", "web-0")
			current := w.start(calicosim.LegacyHandles, "c-web-new", "default", "web-0")
			w.lateDel(old) // frees current's address too
			for _, p := range []*pod{modern, legacy, current} {
				w.cacheEntry(p)
			}

			code, plan, stderr := w.run("--cni-cache", w.cache)
			want := map[string]struct{ kind, handle, ip string }{
				attName("c-modern"):  {KindAdopt, network + ".c-modern", modern.ip},
				attName("c-legacy"):  {KindAdopt, "default.db-0", legacy.ip},
				attName("c-web-new"): {KindEarlyRelease, network + ".c-web-new", current.ip},
			}
			if code != admin.ExitAttention || plan == nil || len(plan.Actions) != len(want) {
				t.Fatalf("dry run: exit %d, plan %+v, stderr %s; want exit 1 and %d actions", code, plan, stderr, len(want))
			}
			for att, a := range byAttachment(plan) {
				exp := want[att]
				if a.Kind != exp.kind || a.Handle != exp.handle || !slices.Equal(a.IPs, []string{exp.ip}) || a.Outcome != OutcomeDryRun {
					t.Errorf("%s: %+v; want kind %s, handle %s, ips [%s], %q", att, a, exp.kind, exp.handle, exp.ip, OutcomeDryRun)
				}
			}
			if ea := byAttachment(plan)[attName("c-web-new")]; !strings.Contains(ea.Why, "free") {
				t.Errorf("early release says %q; want it to say Calico has the address free", ea.Why)
			}
			if recs := w.records(); len(recs) != 0 {
				t.Fatalf("the dry run wrote %d records", len(recs))
			}

			code, plan, stderr = w.run("--cni-cache", w.cache, "--apply")
			if code != admin.ExitAttention || plan.Applied == nil || !*plan.Applied {
				t.Fatalf("apply: exit %d, plan %+v, stderr %s; want exit 1 (an early release) and applied", code, plan, stderr)
			}
			recs := w.records()
			for _, p := range []*pod{modern, legacy, current} {
				checkRecord(t, recs[p.cid], p, want[attName(p.cid)].handle)
			}

			code, plan, _ = w.run("--cni-cache", w.cache, "--apply")
			for _, a := range plan.Actions {
				if a.Kind != KindRecorded || a.Outcome != OutcomeRecorded {
					t.Errorf("second run: %+v; want already recorded", a)
				}
			}
			if code != admin.ExitOK {
				t.Errorf("second run: exit %d; want 0", code)
			}
			for cid, r := range w.records() {
				if r.Revision != recs[cid].Revision {
					t.Errorf("second run rewrote the record of %s", cid)
				}
			}
		})
	}
}

// checkRecord: a committed record of the attachment with the pod, node,
// handle and addresses, and a replayable IPAM result with no interfaces.
func checkRecord(t *testing.T, r *record.Record, p *pod, handle string) {
	t.Helper()
	if r == nil {
		t.Fatalf("no record of %s", p.cid)
	}
	if r.State != record.Committed || r.Handle != handle || r.Node != node1 || r.PodNamespace != p.namespace ||
		r.PodName != p.name || r.PodUID != "uid-"+p.name || r.IfName != "eth0" || !slices.Equal(r.IPs, []string{p.ip}) || r.Owner != nil {
		t.Errorf("record of %s: %+v; want committed, handle %s, node %s, pod %s/%s, ips [%s]", p.cid, r, handle, node1, p.namespace, p.name, p.ip)
	}
	var res struct {
		CNIVersion string            `json:"cniVersion"`
		Interfaces []json.RawMessage `json:"interfaces"`
		IPs        []map[string]any  `json:"ips"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatalf("record of %s: result %s: %v", p.cid, r.Result, err)
	}
	if res.CNIVersion == "" || len(res.Interfaces) != 0 || len(res.IPs) != 1 || res.IPs[0]["address"] != p.ip || res.IPs[0]["interface"] != nil {
		t.Errorf("record of %s: result %s; want the IPAM result: address %s, no interfaces", p.cid, r.Result, p.ip)
	}
}

// Bad input: an entry that does not decode, names another network, names
// another node in its config or carries no address is skipped with a
// warning that names its file, and the good entry is still adopted.
func TestAdoptSkipsBadEntries(t *testing.T) {
	w := newWorld(t, config.StoreFile)
	good := w.start(calicosim.ModernHandles, "c-good", "default", "app-0")
	w.cacheEntry(good)
	broken := filepath.Join(w.cache, network+"-c-broken-eth0")
	w.write(broken, `{"kind":"cniCacheV1","containerId":`)
	other := w.start(calicosim.ModernHandles, "c-other-net", "default", "app-1")
	otherPath := w.cacheEntryFor(other, "other-net", w.confJSON)
	elsewhere := w.start(calicosim.ModernHandles, "c-node2", "default", "app-2")
	elsewherePath := w.cacheEntryFor(elsewhere, network, strings.Replace(w.confJSON, `"nodename":"node1"`, `"nodename":"node2"`, 1))
	empty := &pod{cid: "c-empty", namespace: "default", name: "app-3", result: []byte(`{"cniVersion":"1.0.0","ips":[]}`)}
	emptyPath := w.cacheEntry(empty)

	code, plan, stderr := w.run("--cni-cache", w.cache, "--apply")
	if code != admin.ExitOK || len(plan.Actions) != 1 || plan.Actions[0].Attachment != attName("c-good") {
		t.Fatalf("exit %d, actions %+v, stderr %s; want exit 0 and only c-good adopted", code, plan.Actions, stderr)
	}
	for path, why := range map[string]string{broken: "unexpected end", otherPath: `network "other-net"`, elsewherePath: `node "node2"`, emptyPath: "no address"} {
		if !strings.Contains(stderr, "warning: skipped "+path+": ") || !strings.Contains(stderr, why) {
			t.Errorf("stderr does not warn that %s was skipped (%s):\n%s", path, why, stderr)
		}
	}
	if recs := w.records(); len(recs) != 1 || recs["c-good"] == nil {
		t.Errorf("records %v; want c-good's only", recs)
	}
}

// An unreadable source, a Calico etcd that does not answer, or a missing
// --conf is exit 2 with nothing written.
func TestAdoptUnreadableIsExit2(t *testing.T) {
	w := newWorld(t, config.StoreFile)
	w.cacheEntry(w.start(calicosim.ModernHandles, "c1", "default", "app-0"))
	down := strings.Replace(w.confJSON, w.etcd.Endpoint(), "http://127.0.0.1:1", 1)
	downConf := filepath.Join(t.TempDir(), "down.conflist")
	w.write(downConf, `{"name":"`+network+`","cniVersion":"1.0.0","plugins":[`+down+`]}`)
	everyNode := filepath.Join(t.TempDir(), "live.json")
	w.write(everyNode, `[{"containerID":"c1","ifname":"eth0","podNamespace":"default","podName":"app-0"}]`)
	noPerm := filepath.Join(t.TempDir(), "unreadable")
	if err := os.Mkdir(noPerm, 0o000); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		says string
	}{
		{"missing cache dir", []string{"--conf", w.conf, "--cni-cache", filepath.Join(t.TempDir(), "absent")}, "CNI result cache"},
		{"missing live file", []string{"--conf", w.conf, "--live", filepath.Join(t.TempDir(), "absent.json")}, "absent.json"},
		{"no source", []string{"--conf", w.conf, "--cni-cache="}, "no liveness source"},
		{"calico etcd down", []string{"--conf", downConf, "--cni-cache", w.cache, "--timeout", "3s"}, "127.0.0.1:1"},
		{"no conf", []string{"--cni-cache", w.cache}, "--conf is required"},
		// A --live file of every node would give this node other nodes' records.
		{"every node", []string{"--conf", w.conf, "--live", everyNode, "--node", ""}, "does not name one node"},
	}
	if os.Geteuid() != 0 { // root reads a 0000 directory anyway
		tests = append(tests, struct {
			name string
			args []string
			says string
		}{"unreadable cache dir", []string{"--conf", w.conf, "--cni-cache", noPerm}, "permission denied"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Run(append(tt.args, "--apply"), &stdout, &stderr)
			if code != admin.ExitError || !strings.Contains(stderr.String(), tt.says) {
				t.Errorf("exit %d, stderr %q; want exit 2 saying %q", code, stderr.String(), tt.says)
			}
			if recs := w.records(); len(recs) != 0 {
				t.Errorf("wrote %d records", len(recs))
			}
		})
	}
}

// A record that appears between the plan and the write (the runtime's
// ADD through safe-ipam committed meanwhile) is never overwritten.
func TestAdoptNeverOverwritesARecord(t *testing.T) {
	for _, storeType := range []string{config.StoreFile, config.StoreEtcd} {
		t.Run(storeType, func(t *testing.T) {
			w := newWorld(t, storeType)
			p := w.start(calicosim.ModernHandles, "c1", "default", "app-0")
			w.cacheEntry(p)
			st := w.store()
			ctx := context.Background()
			cfg := mustConfig(t, w.conf)
			source, entries, skipped, err := readCache(ctx, cacheSource(w.cache))
			if err != nil {
				t.Fatal(err)
			}
			planner := &Planner{Cfg: cfg, Node: node1, Store: st, Holders: Holders{}, Now: time.Now}
			plan, err := planner.Plan(ctx, source, entries, skipped)
			if err != nil || len(plan.Actions) != 1 {
				t.Fatalf("plan %+v, %v", plan, err)
			}
			att := record.Attachment{Network: network, ContainerID: "c1", IfName: "eth0"}
			theirs := &record.Record{Attachment: att, Handle: "theirs", State: record.Committed, IPs: []string{"10.244.0.9/26"}, Node: node1}
			written, err := st.Swap(ctx, att, nil, theirs)
			if err != nil {
				t.Fatal(err)
			}
			if err := Apply(ctx, st, plan); err != nil {
				t.Fatal(err)
			}
			got, err := st.Get(ctx, att)
			if err != nil {
				t.Fatal(err)
			}
			if plan.Actions[0].Outcome != OutcomeRaced || got.Handle != "theirs" || got.Revision != written.Revision {
				t.Errorf("outcome %q, record %+v; want %q and the record that appeared untouched", plan.Actions[0].Outcome, got, OutcomeRaced)
			}
			if !errors.Is(createRecord(ctx, st, plan.Actions[0].rec), store.ErrConflict) {
				t.Error("a create over an existing record did not conflict")
			}
		})
	}
}

// Two running pods with one address (the duplicate of incident 002, seen
// by the runtime): the first is adopted, the second is not, since the
// address index never lets two committed records hold one address; the
// report names the other attachment and exit is 1.
func TestAdoptNeverClaimsAHeldAddress(t *testing.T) {
	for _, storeType := range []string{config.StoreFile, config.StoreEtcd} {
		t.Run(storeType, func(t *testing.T) {
			w := newWorld(t, storeType)
			first := w.start(calicosim.ModernHandles, "c-a", "default", "app-0")
			second := &pod{cid: "c-b", namespace: "default", name: "app-1", result: first.result, ip: first.ip}
			w.cacheEntry(first)
			w.cacheEntry(second)
			code, plan, stderr := w.run("--cni-cache", w.cache, "--apply")
			acts := byAttachment(plan)
			a, b := acts[attName("c-a")], acts[attName("c-b")]
			if code != admin.ExitAttention || a.Outcome != OutcomeWritten || b.Outcome != OutcomeHeld || !strings.Contains(b.Why, attName("c-a")) {
				t.Fatalf("exit %d, c-a %+v, c-b %+v, stderr %s; want c-a written and c-b refused naming c-a", code, a, b, stderr)
			}
			if recs := w.records(); len(recs) != 1 || recs["c-a"] == nil {
				t.Errorf("records %v; want c-a's only", recs)
			}
		})
	}
}
