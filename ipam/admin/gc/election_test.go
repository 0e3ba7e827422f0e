package gc_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/gc"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// Issue 41, item 2.7: a Nodes listing that lacks this very node, or most
// of the nodes with records at once (an empty one, twice: a wrong prefix,
// a datastore restored from an old backup), releases nothing and notes
// nothing; the sweep fails and says why, and the metric says it too.
func TestDeadNodesRefusesAMassGoneListing(t *testing.T) {
	for _, tt := range []struct {
		name  string
		known []string
		want  string
	}{
		{"an empty listing", nil, "lack this very node"},
		{"this node alone of three", []string{"node2"}, "lack 2 of the 3 nodes known"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newDeadNodesWorld(t)
			for _, n := range tt.known {
				w.calicoNode(t, n)
			}
			conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
			for sweep := 1; sweep <= 2; sweep++ {
				code, out := w.gc(t, conf, "--apply")
				if code != admin.ExitError || len(w.records(t)) != 3 || calls(t, w.bin) != nil || !strings.Contains(out, tt.want) {
					t.Fatalf("sweep %d: exit %d, records %v, calls %v; want exit 2, nothing released, saying %q\n%s", sweep, code, w.records(t), calls(t, w.bin), tt.want, out)
				}
			}
			if notes, _ := w.etcd.Dump(config.DefaultEtcdPrefix + "/sweeps/k8s-pod-network/gone/"); len(notes) != 1 {
				t.Errorf("notes after refused sweeps: %v; want node1's from before alone", notes)
			}
			addr := freeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int, 1)
			go func() {
				var out bytes.Buffer
				done <- gc.RunContext(ctx, []string{"--conf", conf, "--cni-bin-dir", w.bin, "--dead-nodes", "--apply", "--every", "50ms", "--metrics-addr", addr}, &out, &out)
			}()
			defer func() { cancel(); <-done }()
			deadline := time.Now().Add(10 * time.Second)
			for metric(t, addr, "safe_ipam_gc_dead_node_sweep_refused") != "1" {
				if time.Now().After(deadline) {
					t.Fatalf("safe_ipam_gc_dead_node_sweep_refused = %q; want 1", metric(t, addr, "safe_ipam_gc_dead_node_sweep_refused"))
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// Issue 41, item 2.6: leading means sweeping successfully. A dry-run loop
// writes nothing, so it never campaigns (it would win and never sweep),
// nor sweeps (every node's would);
// a leader whose sweeps fail gives its lead up; a leader's key without a
// live lease is nobody's lead.
func TestSweepElection(t *testing.T) {
	leaderKeys := func(w *deadNodesWorld) int {
		keys, err := w.etcd.Dump(config.DefaultEtcdPrefix + "/sweeps/k8s-pod-network/leader/")
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
	loop := func(w *deadNodesWorld, conf string, rounds time.Duration, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), rounds)
		defer cancel()
		var out bytes.Buffer
		gc.RunContext(ctx, append([]string{"--conf", conf, "--cni-bin-dir", w.bin, "--dead-nodes", "--every", "100ms"}, args...), &out, &out)
		return out.String()
	}
	t.Run("a dry run never campaigns", func(t *testing.T) {
		w := newDeadNodesWorld(t)
		w.calicoNode(t, "node2")
		w.calicoNode(t, "node3")
		conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var out bytes.Buffer
		done := make(chan struct{})
		go func() {
			gc.RunContext(ctx, []string{"--conf", conf, "--cni-bin-dir", w.bin, "--dead-nodes", "--every", "100ms"}, &out, &out)
			close(done)
		}()
		time.Sleep(time.Second)
		if n := leaderKeys(w); n != 0 {
			t.Errorf("a dry-run loop holds %d leader key(s); want none", n)
		}
		<-done
		if !strings.Contains(out.String(), "a dry-run loop does not sweep") || strings.Contains(out.String(), "to release,") {
			t.Errorf("the dry-run loop swept (every node's loop would read every node's records):\n%s", out.String())
		}
		if len(w.records(t)) != 3 {
			t.Errorf("a dry run released: %v", w.records(t))
		}
	})
	t.Run("a leader whose sweeps fail resigns", func(t *testing.T) {
		w := newDeadNodesWorld(t)
		// Calico's datastore unreachable: every sweep fails.
		conf := w.conf(t, `"etcd_endpoints":"http://127.0.0.1:9"`)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			var out bytes.Buffer
			gc.RunContext(ctx, []string{"--conf", conf, "--cni-bin-dir", w.bin, "--dead-nodes", "--apply", "--every", "200ms", "--timeout", "2s"}, &out, &out)
			close(done)
		}()
		defer func() { cancel(); <-done }()
		held, freed := false, false
		for !freed && ctx.Err() == nil {
			n := leaderKeys(w)
			held, freed = held || n > 0, held && n == 0
			time.Sleep(20 * time.Millisecond)
		}
		if !freed {
			t.Errorf("the failing leader kept its lead (ever held it: %v)", held)
		}
	})
	t.Run("a leader whose --conf stops naming safe-ipam resigns", func(t *testing.T) {
		// Review of issue 41: a round that fails before the sweep (calico-node
		// rewrote the conflist, and the watch has not patched it yet) is a
		// failed sweep too; the leader kept its lease alive for ever.
		w := newDeadNodesWorld(t)
		conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			var out bytes.Buffer
			gc.RunContext(ctx, []string{"--conf", conf, "--cni-bin-dir", w.bin, "--dead-nodes", "--apply", "--every", "100ms"}, &out, &out)
			close(done)
		}()
		defer func() { cancel(); <-done }()
		for leaderKeys(w) == 0 && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		calicos := `{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico","etcd_endpoints":"` + w.etcd.Endpoint() + `","nodename":"node2","ipam":{"type":"calico-ipam"}}]}`
		if err := os.WriteFile(conf, []byte(calicos), 0o644); err != nil {
			t.Fatal(err)
		}
		for leaderKeys(w) > 0 && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		if ctx.Err() != nil {
			t.Errorf("the leader kept its lead through rounds that never reached the sweep")
		}
	})
	t.Run("a leader key without a live lease leads nobody", func(t *testing.T) {
		w := newDeadNodesWorld(t)
		w.calicoNode(t, "node2")
		w.calicoNode(t, "node3")
		conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
		key := config.DefaultEtcdPrefix + "/sweeps/k8s-pod-network/leader/stale"
		if _, err := w.etcd.Client().Put(context.Background(), key, "node9", clientv3.WithPrevKV()); err != nil {
			t.Fatal(err)
		}
		out := loop(w, conf, 5*time.Second, "--apply")
		if strings.Contains(out, "node9 sweeps") || !strings.Contains(out, "node node1 is gone") {
			t.Errorf("a leaseless leader key was obeyed, or node2 never swept:\n%s", out)
		}
	})
}

// Review of issue 41: a note an older release wrote (its writer's wall
// clock) is no sighting, and goes like any other: forgotten once its node
// is known again, or noted anew on etcd's clock when it is still gone.
func TestDeadNodesOlderReleasesNotes(t *testing.T) {
	w := newDeadNodesWorld(t)
	w.calicoNode(t, "node2")
	w.calicoNode(t, "node3")
	gone := config.DefaultEtcdPrefix + "/sweeps/k8s-pod-network/gone/"
	for _, node := range []string{"node1", "node3"} {
		if _, err := w.etcd.Client().Put(context.Background(), gone+node, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)); err != nil {
			t.Fatal(err)
		}
	}
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	code, out := w.gc(t, conf, "--apply")
	if code != admin.ExitOK || len(w.records(t)) != 3 || !strings.Contains(out, "found so first now") {
		t.Fatalf("the first sweep after the upgrade released on an older release's note, or failed: exit %d, records %v\n%s", code, w.records(t), out)
	}
	notes, err := w.etcd.Dump(gone)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := notes[gone+"node3"]; ok || len(notes) != 1 || strings.HasPrefix(notes[gone+"node1"], "20") {
		t.Errorf("notes after the sweep: %v; want node3's forgotten and node1's written anew", notes)
	}
}

func TestDeadNodeMaxShareMustBeAFraction(t *testing.T) {
	w := newDeadNodesWorld(t)
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	for _, v := range []string{"0", "-1", "1.5", "NaN"} {
		if code, out := w.gc(t, conf, "--dead-node-max-share="+v); code != admin.ExitError || !strings.Contains(out, "--dead-node-max-share") {
			t.Errorf("--dead-node-max-share=%s: exit %d\n%s", v, code, out)
		}
	}
	// Review of issue 41: a negative grace would take the grace for
	// passed at once, and --former-node with this node's own name judges
	// its records twice.
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--dead-node-grace=-1s"}, "--dead-node-grace"},
		{[]string{"--live", "/dev/null", "--former-node", "node2"}, "is this node's Calico name now"},
	} {
		if code, out := w.gc(t, conf, tt.args...); code != admin.ExitError || !strings.Contains(out, tt.want) {
			t.Errorf("%v: exit %d, want 2 naming %q\n%s", tt.args, code, tt.want, out)
		}
	}
}

// Issue 44, item 8: the sweeper is visible. The elected node says in its
// log that it leads; the metrics say who leads, when this pod last swept,
// whether that sweep went well, and what its sweeps released.
func TestTheSweeperIsVisible(t *testing.T) {
	w := newDeadNodesWorld(t)
	w.calicoNode(t, "node2")
	w.calicoNode(t, "node3")
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- gc.RunContext(ctx, []string{"--conf", conf, "--cni-bin-dir", w.bin, "--dead-nodes", "--apply", "--every", "100ms", "--metrics-addr", addr}, &out, &out)
	}()
	want := map[string]string{
		`safe_ipam_gc_dead_node_sweep_leader{node="node2"}`: "1",
		"safe_ipam_gc_dead_node_sweep_last_success":         "1",
		"safe_ipam_gc_dead_node_sweep_released_total":       "1",
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		missing := ""
		for name, v := range want {
			if metric(t, addr, name) != v {
				missing = name
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("%s = %q; want %s\n%s", missing, metric(t, addr, missing), want[missing], out.String())
		}
	}
	if v := metric(t, addr, "safe_ipam_gc_dead_node_sweep_last_timestamp_seconds"); v == "" || v == "0" {
		t.Errorf("safe_ipam_gc_dead_node_sweep_last_timestamp_seconds = %q; want the sweep's time", v)
	}
	cancel()
	<-done
	if n := strings.Count(out.String(), "this node leads the dead-node sweeps of network k8s-pod-network"); n != 1 {
		t.Errorf("the leader said it leads %d times; want once:\n%s", n, out.String())
	}
	// Issue 44, item 11: the sweep's summary counts other nodes' records,
	// and says so (it said "on node node2", the sweeper).
	if !strings.Contains(out.String(), "records of network k8s-pod-network on other nodes (swept by node node2)") {
		t.Errorf("the sweep's summary does not say whose records it counts:\n%s", out.String())
	}
}
