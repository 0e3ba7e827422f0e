package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

func forEachStore(t *testing.T, fn func(t *testing.T, r *rig)) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) { fn(t, newRig(t, kind)) })
	}
}

func TestAddRecordsAndPassesConfigThrough(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		res := r.add("c1")
		if res.Version() != "1.0.0" {
			t.Errorf("result version %s", res.Version())
		}
		rec := r.record("c1")
		if rec == nil || rec.State != record.Committed || len(rec.IPs) != 1 || rec.Handle != "net1.c1" ||
			rec.PodNamespace != "default" || rec.PodName != "web-0" || rec.PodUID != "uid-c1" || rec.Node != "node1" {
			t.Fatalf("record = %+v", rec)
		}
		adds := r.calls("ADD")
		if len(adds) != 1 {
			t.Fatalf("delegate ADD calls = %d, want 1", len(adds))
		}
		if adds[0].Args != env("c1").Args {
			t.Errorf("ADD CNI_ARGS = %q, want them unchanged %q", adds[0].Args, env("c1").Args)
		}
		checkDelegateConf(t, r.conf(), adds[0].Stdin, "1.0.0")
	})
}

// checkDelegateConf: every key but safe-ipam's own reaches the delegate
// with the same value; ipam.type names the delegate.
func checkDelegateConf(t *testing.T, sent, got []byte, wantVersion string) {
	t.Helper()
	var s, g map[string]any
	if err := json.Unmarshal(sent, &s); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if g["cniVersion"] != wantVersion {
		t.Errorf("delegate cniVersion = %v, want %s", g["cniVersion"], wantVersion)
	}
	for k, v := range s {
		if k == "ipam" || k == "cniVersion" {
			continue
		}
		if !reflect.DeepEqual(g[k], v) {
			t.Errorf("top-level %s = %v, want %v", k, g[k], v)
		}
	}
	sIPAM, gIPAM := s["ipam"].(map[string]any), g["ipam"].(map[string]any)
	if gIPAM["type"] != sIPAM["delegate"].(map[string]any)["type"] {
		t.Errorf("delegate ipam.type = %v", gIPAM["type"])
	}
	for _, owned := range ownedKeysForTest {
		if _, ok := gIPAM[owned]; ok && owned != "type" {
			t.Errorf("safe-ipam's key ipam.%s reached the delegate", owned)
		}
	}
	for k, v := range sIPAM {
		if contains(ownedKeysForTest, k) {
			continue
		}
		if !reflect.DeepEqual(gIPAM[k], v) {
			t.Errorf("ipam.%s = %v, want %v", k, gIPAM[k], v)
		}
	}
}

var ownedKeysForTest = []string{"type", "delegate", "delegateHandles", "store", "logFile", "logLevel", "cacheDir", "gcGracePeriod"}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestRepeatedAddAnswersFromRecord(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		first, second := r.add("c1"), r.add("c1")
		a, _ := json.Marshal(first)
		b, _ := json.Marshal(second)
		if string(a) != string(b) {
			t.Errorf("second ADD gave %s, first %s", b, a)
		}
		if n := len(r.calls("ADD")); n != 1 {
			t.Errorf("delegate ADD called %d times, want 1", n)
		}
	})
}

func TestDelNeverPassesPodIdentity(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.add("c1")
		r.del("c1")
		dels := r.calls("DEL")
		if len(dels) != 1 {
			t.Fatalf("delegate DEL calls = %d", len(dels))
		}
		want := "IgnoreUnknown=1;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=uid-c1"
		if dels[0].Args != want {
			t.Errorf("DEL CNI_ARGS = %q, want %q", dels[0].Args, want)
		}
		if dels[0].ContainerID != "c1" || dels[0].IfName != "eth0" || dels[0].NetNS != env("c1").NetNS {
			t.Errorf("DEL env = %+v", dels[0])
		}
		if r.record("c1") != nil || len(r.held()) != 0 {
			t.Errorf("after DEL: record %+v, delegate holds %v", r.record("c1"), r.held())
		}
	})
}

// The incident: a pod-name handle held by a live pod survives the DEL of
// another container of the same pod name.
func TestDelKeepsPodNameHandleOfLivePod(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.seedHandle("default.web-0", "10.0.0.200/24")
		r.add("replaced")
		r.del("replaced")
		if got := r.held()["default.web-0"]; len(got) != 1 {
			t.Fatalf("pod-name handle after DEL = %v; the live pod lost its address", got)
		}
	})
}

func TestPodHandlesStripIdentityOnAdd(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.handles = "pod"
		t.Setenv(fakeHandlesEnv, "legacy")
		r.add("a")
		r.add("b")
		for _, c := range r.calls("ADD") {
			if strings.Contains(c.Args, "K8S_POD_NAME") || strings.Contains(c.Args, "K8S_POD_NAMESPACE") {
				t.Errorf("ADD CNI_ARGS carry pod identity: %q", c.Args)
			}
			if !strings.Contains(c.Args, "K8S_POD_UID=") {
				t.Errorf("ADD CNI_ARGS lost other keys: %q", c.Args)
			}
		}
		if rec := r.record("a"); rec.Handle != "a" {
			t.Errorf("record handle = %q, want the container ID", rec.Handle)
		}
		r.del("a") // the late DEL of the old incarnation
		held := r.held()
		if len(held["b"]) != 1 || len(held["a"]) != 0 || len(held["default.web-0"]) != 0 {
			t.Errorf("after late DEL of a: delegate holds %v; want only b's address", held)
		}
	})
}

func TestDelIsIdempotent(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.del("never-added")
		r.add("c1")
		r.del("c1")
		r.del("c1")
		e := env("c1")
		e.NetNS = "" // the netns is gone
		if _, err := r.run("DEL", e, r.conf()); err != nil {
			t.Fatalf("DEL without netns: %v", err)
		}
		if len(r.records()) != 0 || len(r.held()) != 0 {
			t.Errorf("left: records %v, delegate %v", r.records(), r.held())
		}
	})
}

func TestDelegateDelFailureKeepsRecord(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.add("c1")
		t.Setenv(fakeFailEnv, "DEL")
		if _, err := r.run("DEL", env("c1"), r.conf()); err == nil {
			t.Fatal("DEL succeeded with a failing delegate")
		}
		if rec := r.record("c1"); rec == nil {
			t.Fatal("record dropped although the delegate kept the address")
		}
		t.Setenv(fakeFailEnv, "")
		r.del("c1")
		if r.record("c1") != nil || len(r.held()) != 0 {
			t.Errorf("retry left record %v, delegate %v", r.record("c1"), r.held())
		}
	})
}

func TestDelegateAddFailureReleasesAndRecordsNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		t.Setenv(fakeFailEnv, "ADD")
		_, err := r.run("ADD", env("c1"), r.conf())
		if cniCode(err) != types.ErrInternal || !strings.Contains(err.Error(), "fake delegate fails ADD") {
			t.Fatalf("ADD error = %v; want the delegate's error", err)
		}
		if n := len(r.calls("DEL")); n != 1 {
			t.Errorf("delegate DEL after failed ADD called %d times, want 1", n)
		}
		if len(r.records()) != 0 {
			t.Errorf("records left: %v", r.records())
		}
	})
}

func TestVersionBridgingAndCache(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		res := r.add("c1")
		if res.Version() != "1.1.0" {
			t.Errorf("result version %s, want 1.1.0", res.Version())
		}
		r.add("c2")
		r.del("c1")
		adds := r.calls("ADD")
		checkDelegateConf(t, r.conf(), adds[0].Stdin, "1.0.0")
		if n := len(r.calls("VERSION")); n != 1 {
			t.Errorf("delegate VERSION asked %d times over 3 calls, want 1 (cached)", n)
		}
		r.cniVersion = "0.3.1"
		res = r.add("c3")
		if res.Version() != "0.3.1" {
			t.Errorf("result version %s, want 0.3.1", res.Version())
		}
		r.cniVersion = "1.0.0" // replay in another version than recorded
		if res := r.add("c3"); res.Version() != "1.0.0" {
			t.Errorf("replayed result version %s", res.Version())
		}
	})
}

func TestIncompatibleDelegateVersion(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		t.Setenv(fakeVersionsEnv, "1.0.0")
		r.cniVersion = "0.4.0"
		_, err := r.run("ADD", env("c1"), r.conf())
		if cniCode(err) != types.ErrIncompatibleCNIVersion {
			t.Fatalf("ADD error = %v; want code 1", err)
		}
		if len(r.calls("ADD")) != 0 || len(r.records()) != 0 {
			t.Errorf("something changed")
		}
	})
}

func withPrevResult(t *testing.T, conf []byte, prev types.Result) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(prev)
	var p any
	_ = json.Unmarshal(raw, &p)
	m["prevResult"] = p
	out, _ := json.Marshal(m)
	return out
}

func TestCheck(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		res := r.add("c1")
		if _, err := r.run("CHECK", env("c1"), withPrevResult(t, r.conf(), res)); err != nil {
			t.Fatalf("CHECK of a good attachment: %v", err)
		}
		if n := len(r.calls("CHECK")); n != 0 {
			t.Errorf("CHECK forwarded to calico-ipam %d times", n)
		}
		other := r.add("c2")
		tests := []struct {
			name string
			cid  string
			conf []byte
			code uint
		}{
			{"addresses differ", "c1", withPrevResult(t, r.conf(), other), guard.ErrRecordMismatch},
			{"no record", "c9", withPrevResult(t, r.conf(), res), types.ErrUnknownContainer},
			{"no prevResult", "c1", r.conf(), types.ErrInvalidNetworkConfig},
		}
		for _, tt := range tests {
			_, err := r.run("CHECK", env(tt.cid), tt.conf)
			if cniCode(err) != tt.code {
				t.Errorf("%s: CHECK error %v, want code %d", tt.name, err, tt.code)
			}
		}
	})
}

func TestCheckForwardedToDelegateWithCheck(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.delegate = "host-ipam"
		res := r.add("c1")
		if _, err := r.run("CHECK", env("c1"), withPrevResult(t, r.conf(), res)); err != nil {
			t.Fatal(err)
		}
		if n := len(r.calls("CHECK")); n != 1 {
			t.Errorf("CHECK forwarded %d times, want 1", n)
		}
		t.Setenv(fakeFailEnv, "CHECK")
		if _, err := r.run("CHECK", env("c1"), withPrevResult(t, r.conf(), res)); err == nil {
			t.Error("a failing delegate CHECK passed")
		}
	})
}

func gcConf(t *testing.T, conf []byte, valid ...string) []byte {
	t.Helper()
	var m map[string]any
	_ = json.Unmarshal(conf, &m)
	list := []map[string]string{}
	for _, cid := range valid {
		list = append(list, map[string]string{"containerID": cid, "ifname": "eth0"})
	}
	m["cni.dev/valid-attachments"] = list
	out, _ := json.Marshal(m)
	return out
}

func TestGC(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		for _, cid := range []string{"live", "gone1", "gone2"} {
			r.add(cid)
		}
		if _, err := r.run("GC", delegate.Env{Path: binDir}, r.conf()); err != nil {
			t.Fatalf("GC without a list: %v", err)
		}
		if len(r.records()) != 3 {
			t.Fatalf("GC without valid-attachments released something: %d records left", len(r.records()))
		}
		if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf(), "live")); err != nil {
			t.Fatalf("GC: %v", err)
		}
		recs := r.records()
		if len(recs) != 1 || recs[0].ContainerID != "live" {
			t.Fatalf("records after GC: %v", recs)
		}
		held := r.held()
		if len(held) != 1 || len(held["net1.live"]) != 1 {
			t.Errorf("delegate holds %v after GC; want only live", held)
		}
		for _, c := range r.calls("DEL") {
			if c.Args != "" {
				t.Errorf("GC's DEL carried CNI_ARGS %q", c.Args)
			}
		}
		if n := len(r.calls("GC")); n != 0 {
			t.Errorf("GC forwarded to a delegate without 1.1.0")
		}
	})
}

func TestGCSparesYoungPendingAndForwards(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		t.Setenv(fakeVersionsEnv, "0.4.0,1.0.0,1.1.0")
		r.cniVersion = "1.1.0"
		r.crashAt = guard.AddReserved
		for _, cid := range []string{"young", "old"} {
			if _, err := r.run("ADD", env(cid), r.conf()); err != errCrashed {
				t.Fatalf("ADD: %v", err)
			}
		}
		r.crashAt = ""
		old := r.record("old")
		old.Created = time.Now().Add(-2 * time.Minute)
		if _, err := r.store().Swap(t.Context(), old.Attachment, old, old); err != nil {
			t.Fatal(err)
		}
		if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
			t.Fatalf("GC: %v", err)
		}
		if r.record("young") == nil || r.record("old") != nil {
			t.Errorf("after GC: young %v, old %v; want young kept, old collected", r.record("young"), r.record("old"))
		}
		if n := len(r.calls("GC")); n != 1 {
			t.Errorf("GC forwarded %d times to a 1.1.0 delegate, want 1", n)
		}
	})
}

func TestGCReportsEveryError(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		r.add("a")
		r.add("b")
		t.Setenv(fakeFailEnv, "DEL")
		_, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf()))
		if err == nil || !strings.Contains(err.Error(), "2 error(s)") {
			t.Fatalf("GC error = %v; want both failures", err)
		}
		if len(r.records()) != 2 {
			t.Errorf("records dropped although their release failed")
		}
	})
}

func TestStatus(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		if _, err := r.run("STATUS", delegate.Env{Path: binDir}, r.conf()); err != nil {
			t.Fatalf("STATUS: %v", err)
		}
		if _, err := r.run("STATUS", delegate.Env{Path: t.TempDir()}, r.conf()); cniCode(err) != types.ErrPluginNotAvailable {
			t.Errorf("STATUS without delegate binary: %v; want 50", err)
		}
		t.Setenv(fakeVersionsEnv, "1.0.0,1.1.0")
		t.Setenv(fakeFailEnv, "STATUS")
		r.extraIPAM = map[string]any{"cacheDir": ""} // the same binary now answers VERSION differently
		if _, err := r.run("STATUS", delegate.Env{Path: binDir}, r.conf()); cniCode(err) != types.ErrLimitedConnectivity {
			t.Errorf("STATUS with a limited delegate: %v; want its code 51", err)
		}
	})
}

func TestUnreachableStore(t *testing.T) {
	r := newRig(t, "etcd")
	r.extraIPAM = map[string]any{"store": map[string]any{"type": "etcd", "endpoints": []string{"http://127.0.0.1:1"}, "dialTimeout": "200ms"}}
	r.cniVersion = "1.1.0"
	for verb, code := range map[string]uint{"ADD": types.ErrTryAgainLater, "DEL": types.ErrTryAgainLater, "STATUS": types.ErrPluginNotAvailable} {
		_, err := r.run(verb, env("c1"), r.conf())
		if cniCode(err) != code {
			t.Errorf("%s with etcd down: %v; want code %d", verb, err, code)
		}
	}
	if calls := r.calls(""); len(calls) != 1 || calls[0].Command != "VERSION" {
		t.Errorf("delegate was called with the store down: %+v", calls)
	}
}

func TestResultIPsMatchRecord(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		res, _ := r.add("c1").GetAsVersion("1.0.0")
		got := fmt.Sprint(res.(*types100.Result).IPs[0].Address.String())
		if rec := r.record("c1"); rec.IPs[0] != got {
			t.Errorf("record %v, result %s", rec.IPs, got)
		}
	})
}

// The GC verb keeps its own rules: a committed record that the runtime's
// valid list leaves out is collected however young it is (safe-ipam gc,
// which lists from outside the runtime, keeps it; see package gc).
func TestGCVerbCollectsYoungCommitted(t *testing.T) {
	r := newRig(t, "file")
	r.cniVersion = "1.1.0"
	r.extraIPAM = map[string]any{"gcGracePeriod": "1m"}
	r.add("fresh")
	if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if recs := r.records(); len(recs) != 0 {
		t.Fatalf("records after GC: %d", len(recs))
	}
}

// GC frees whatever the list leaves out, so a list it cannot read must
// free nothing: every malformed entry is a CNI error naming it, and the
// live attachment keeps its record and address.
func TestGCRefusesMalformedValidAttachments(t *testing.T) {
	for _, tt := range []struct{ name, list, names string }{
		{"null entry", `[null]`, "[0]"},
		{"wrong key", `[{"id":"live","ifname":"eth0"}]`, "[0]"},
		{"empty container ID", `[{"containerID":"","ifname":"eth0"}]`, "containerID"},
		{"no ifname", `[{"containerID":"live"}]`, "ifname"},
		{"not an object", `["live"]`, "[0]"},
		{"second entry bad", `[{"containerID":"live","ifname":"eth0"},{"containerID":"x","ifname":""}]`, "[1]"},
		{"not a list", `{"containerID":"live","ifname":"eth0"}`, "cni.dev/valid-attachments"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "file")
			r.cniVersion = "1.1.0"
			r.add("live")
			var m map[string]json.RawMessage
			if err := json.Unmarshal(r.conf(), &m); err != nil {
				t.Fatal(err)
			}
			m["cni.dev/valid-attachments"] = json.RawMessage(tt.list)
			stdin, _ := json.Marshal(m)
			_, err := r.run("GC", delegate.Env{Path: binDir}, stdin)
			var cniErr *types.Error
			if !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tt.names) {
				t.Fatalf("GC with %s: %v; want CNI error %d naming %s", tt.list, err, types.ErrInvalidNetworkConfig, tt.names)
			}
			if recs := r.records(); len(recs) != 1 || len(r.calls("DEL")) != 0 {
				t.Fatalf("a refused GC changed something: %d records, %d DELs", len(recs), len(r.calls("DEL")))
			}
		})
	}
}

// Issue 31, finding 9: libcni sends cni.dev/valid-attachments as null when
// the runtime has no sandbox of the network. Nothing recorded: nothing to
// collect, success. Records held: the empty answer is not trusted, and the
// error says so (11), not that the list is malformed.
func TestGCTakesANullListAsNoSandbox(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		null := nullGCConf(r)
		if _, err := r.run("GC", delegate.Env{Path: binDir}, null); err != nil {
			t.Fatalf("GC of a null list with no record: %v", err)
		}
		r.add("c1")
		_, err := r.run("GC", delegate.Env{Path: binDir}, null)
		if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "is null") || strings.Contains(err.Error(), "must be a list") {
			t.Fatalf("GC of a null list with a record: %v; want code 11 saying the null list is not trusted", err)
		}
		if len(r.records()) != 1 || len(r.held()["net1.c1"]) != 1 {
			t.Fatalf("GC of a null list released something: records %v, held %v", r.records(), r.held())
		}
	})
}

// nullGCConf is a GC config whose cni.dev/valid-attachments is null.
func nullGCConf(r *rig) []byte {
	var m map[string]any
	_ = json.Unmarshal(r.conf(), &m)
	m["cni.dev/valid-attachments"] = nil
	null, _ := json.Marshal(m)
	return null
}

// Issue 41, item 2.9: in a store machines share, records another host
// wrote under this node's name are not this runtime's to judge, so they
// do not make a null list untrusted: GC answers 0, and keeps them. A
// file store is this machine's alone (a host rename changes nothing), so
// there the record counts, and GC answers 11.
func TestGCOfANullListWithAnotherHostsRecordsOnly(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		null := nullGCConf(r)
		r.add("c1")
		rec := r.record("c1")
		other := *rec
		other.Host = "other-machine"
		if _, err := r.store().Swap(context.Background(), rec.Attachment, rec, &other); err != nil {
			t.Fatal(err)
		}
		_, err := r.run("GC", delegate.Env{Path: binDir}, null)
		if _, shared := r.store().(store.Cluster); shared && err != nil || !shared && cniCode(err) != types.ErrTryAgainLater {
			t.Fatalf("GC of a null list, the only record another host's, in a %s store: %v", r.kind, err)
		}
		if len(r.records()) != 1 || len(r.held()["net1.c1"]) != 1 {
			t.Fatalf("GC of a null list released something: records %v, held %v", r.records(), r.held())
		}
	})
}

// Review of issue 41: a file store holds this machine's records whatever
// Calico name each was written under. After the node's Calico name
// changes, GC judges the older records by the runtime as before (they
// are not another node's), and releases the gone one.
func TestGCOfAFileStoreAfterACalicoRename(t *testing.T) {
	r := newRig(t, "file")
	r.cniVersion = "1.1.0"
	r.add("gone")
	r.add("live")
	r.node = "node1-renamed"
	if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf(), "live")); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if r.record("gone") != nil || r.record("live") == nil {
		t.Fatalf("after GC under the new name: gone %+v, live %+v; want gone released, live kept", r.record("gone"), r.record("live"))
	}
}
