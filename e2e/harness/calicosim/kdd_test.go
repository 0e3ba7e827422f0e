package calicosim

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// TestKDDConcurrentAdds runs ADDs from many goroutines without the host
// lock, in blocks small enough that several are claimed in the race: only
// resourceVersion guards keep the addresses apart.
func TestKDDConcurrentAdds(t *testing.T) {
	k := newKDD(t, poolSpec{"small", "10.60.0.0/24", 28})
	const workers, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p := pod{fmt.Sprintf("c%d-%d", w, i), "default", fmt.Sprintf("p%d-%d", w, i)}
				if _, err := k.add(ModernHandles, p, k.conf(nil)); err != nil {
					errs <- fmt.Errorf("ADD %s: %w", p.container, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := k.state()
	seen := map[string]string{}
	for _, a := range s.Allocations() {
		if other, dup := seen[a.IP.String()]; dup {
			t.Errorf("%s handed to %s and %s", a.IP, other, a.Handle)
		}
		seen[a.IP.String()] = a.Handle
	}
	if len(seen) != workers*each {
		t.Errorf("%d addresses allocated, want %d", len(seen), workers*each)
	}
	if bad := s.Inconsistencies(); len(bad) > 0 {
		t.Errorf("handles and blocks disagree: %v", bad)
	}
	// A claim on KDD takes three writes (affinity pending, block,
	// affinity confirmed), and a worker that lists the node's blocks in
	// between sees none with room and claims another. calico-ipam's host
	// lock keeps one node's ADDs apart; without it (as here) a race may
	// claim one block more per other worker, but a worker that lost a
	// claim must not go on claiming block after block.
	if least := (workers*each + 15) / 16; len(s.Blocks) < least || len(s.Blocks) > least+workers-1 {
		t.Errorf("%d blocks claimed, want %d to %d", len(s.Blocks), least, least+workers-1)
	}
}

// TestKDDConcurrentProcesses runs the simulator binary in several
// processes at once, each finding the Kubernetes datastore from its
// config alone, without the host lock.
func TestKDDConcurrentProcesses(t *testing.T) {
	k := newKDD(t, poolSpec{"small", "10.61.0.0/24", 28})
	bin := buildSimulator(t)
	const procs = 12
	outs := make(chan string, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := pod{fmt.Sprintf("proc%d", i), "default", fmt.Sprintf("proc-%d", i)}
			o, err := execBinary(bin, invocation{"ADD", p, k.conf(nil), []string{EnvLockFile + "=" + NoLock}})
			if err != nil || o.exit != 0 {
				outs <- fmt.Sprintf("ADD %s: %v exit %d: %s%s", p.container, err, o.exit, o.stdout, o.stderr)
			}
		}()
	}
	wg.Wait()
	close(outs)
	for o := range outs {
		t.Error(o)
	}
	s := k.state()
	if n := len(s.Allocations()); n != procs {
		t.Errorf("%d addresses allocated, want %d", n, procs)
	}
	if bad := s.Inconsistencies(); len(bad) > 0 {
		t.Errorf("handles and blocks disagree: %v", bad)
	}
}

// TestKDDDeletedMarkFinished leaves a handle marked deleted, as a deleter
// that died between its two requests would: the next reader deletes it
// for good and treats it as absent.
func TestKDDDeletedMarkFinished(t *testing.T) {
	k := newKDD(t, replayPool)
	web := pod{"eee555", "default", "web-5"}
	k.mustAdd(ModernHandles, web)
	name := calico.HandleName(network + ".eee555")
	before, err := k.dyn.Resource(kindHandle.gvr).Get(k.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(before.Object, true, "spec", "deleted"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.dyn.Resource(kindHandle.gvr).Update(k.ctx, before, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := k.state().HandleCount(network + ".eee555"); got != 0 {
		t.Errorf("a handle marked deleted counts %d in KubeState, want absent", got)
	}
	// The same handle allocates again: the marked object is finished and
	// a new one counts only the new address.
	k.mustAdd(ModernHandles, web)
	after, err := k.dyn.Resource(kindHandle.gvr).Get(k.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetUID() == before.GetUID() {
		t.Error("the handle marked deleted was reused, not deleted and created anew")
	}
	if n := k.state().HandleCount(network + ".eee555"); n != 1 {
		t.Errorf("handle counts %d addresses, want 1 (the new one)", n)
	}
}

// TestKDDHandleNames checks that the object name is lowercased while the
// ID keeps its case, that DEL finds the handle, and that an ID that is no
// valid object name fails ADD with a clear error.
func TestKDDHandleNames(t *testing.T) {
	k := newKDD(t, replayPool)
	upper := pod{"FFF666", "default", "web-6"}
	k.mustAdd(ModernHandles, upper)
	o, err := k.dyn.Resource(kindHandle.gvr).Get(k.ctx, "k8s-pod-network.fff666", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("handle object not found by its lowercased name: %v", err)
	}
	if id, _, _ := unstructured.NestedString(o.Object, "spec", "handleID"); id != "k8s-pod-network.FFF666" {
		t.Errorf("spec.handleID %q, want the original case", id)
	}
	k.mustDel(ModernHandles, upper)
	if s := k.state(); len(s.Allocations()) != 0 || len(s.Handles) != 0 {
		t.Errorf("after DEL: allocations %v, handles %v", s.Allocations(), s.Handles)
	}
	_, err = k.add(ModernHandles, pod{"hhh888", "default", "web-8"}, k.conf(map[string]any{"name": "k8s_pod_network"}))
	if err == nil || !strings.Contains(err.Error(), "not a lowercase RFC 1123 subdomain") {
		t.Errorf("ADD with an invalid handle name: %v", err)
	}
}
