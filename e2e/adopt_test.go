package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// Issue 14's proof. On a node with Calico 2.x handles and no safe-ipam,
// StatefulSet pod web-0 runs in sandbox B, and the late DEL of its older
// sandbox A frees B's address behind its back. Then safe-ipam is
// installed, `safe-ipam adopt --apply` records B from the runtime's CNI
// cache (written by libcni through cnitool, as a runtime writes it), and
// new pods start through safe-ipam until the block has cycled twice.
//   - With adopt, no new pod gets B's address: the ADD that Calico hands
//     it to fails with 11 and the address stays allocated, quarantined;
//     the runtime retries that pod in a new sandbox. Deleting B releases
//     everything, the quarantine included.
//   - The control installs safe-ipam without adopt: safe-ipam has no
//     record of B, so a new pod gets B's address: the duplicate.
func TestAdoptFencesARunningPodsFreedAddress(t *testing.T) {
	for _, tc := range []struct {
		name, tag string
		adopt     bool
		etcdStore bool
	}{
		{"adopt then fencing, file store", "adf", true, false},
		{"adopt then fencing, etcd store", "ade", true, true},
		{"control: safe-ipam without adopt", "adc", false, false},
	} {
		adopt := tc.adopt
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			c := newCluster(t, tc.tag)
			dumpOnFailure(t, c)
			p := &adoptProof{t: t, ctx: ctx, c: c}
			p.beforeSafeIPAM()
			var st *testbed.Store
			if tc.etcdStore {
				s := testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1")
				st = &s
			}
			p.installSafeIPAM(st)
			if adopt {
				p.adopt()
			}
			p.cycleBlockTwice()
			held, err := testbed.Observe(ctx, p.all())
			if err != nil {
				t.Fatal(err)
			}
			dups := held.Duplicates()
			if !adopt {
				if holders := dups[p.bAddr]; len(holders) < 2 {
					t.Fatalf("control: no new pod got B's %s (duplicates %s): the incident did not reproduce", p.bAddr, testbed.DescribeDuplicates(dups))
				}
				return
			}
			if len(dups) > 0 {
				t.Fatalf("with adopt, addresses held twice: %s", testbed.DescribeDuplicates(dups))
			}
			if p.fenced == 0 {
				t.Fatalf("no ADD was handed B's %s in two cycles of the block: the proof proved nothing", p.bAddr)
			}
			p.requireAllocated("while B runs")
			p.auditShowsQuarantine()
			p.deleteB()
			p.deleteAllAndRequireNothingLeft()
		})
	}
}

// adoptProof is the story's state.
type adoptProof struct {
	t      *testing.T
	ctx    context.Context
	c      *testbed.Cluster
	node   *testbed.Node
	safe   *testbed.SafeConfig
	b      testbed.Sandbox
	bAddr  netip.Addr
	others []testbed.Sandbox
	fenced int
	n      int
}

func (p *adoptProof) all() []testbed.Sandbox { return append([]testbed.Sandbox{p.b}, p.others...) }

func (p *adoptProof) sandbox(pod testbed.Pod) testbed.Sandbox {
	p.t.Helper()
	p.n++
	ns, err := p.c.Netns.Add(p.ctx, fmt.Sprintf("%s-%d", pod.Name, p.n))
	if err != nil {
		p.t.Fatal(err)
	}
	return testbed.Sandbox{Pod: pod, Netns: ns}
}

// beforeSafeIPAM: calico-ipam alone; web-0's sandbox A is replaced by B,
// and A's late DEL (Calico 2.x, by pod name) frees B's address.
func (p *adoptProof) beforeSafeIPAM() {
	p.t.Helper()
	if err := p.c.Seed(p.ctx, "node1"); err != nil {
		p.t.Fatal(err)
	}
	p.node = p.c.Node("node1", testbed.Legacy)
	if err := p.c.Network(adoptNetwork, "1.0.0", p.node, nil).WriteConflist(p.node.ConfDir); err != nil {
		p.t.Fatal(err)
	}
	web0 := testbed.Pod{Namespace: "default", Name: "web-0"}
	a := p.sandbox(web0)
	if _, err := p.node.Add(p.ctx, adoptNetwork, a); err != nil {
		p.t.Fatalf("ADD of A: %v", err)
	}
	p.b = p.sandbox(web0)
	res, err := p.node.Add(p.ctx, adoptNetwork, p.b)
	if err != nil {
		p.t.Fatalf("ADD of B: %v", err)
	}
	pfx, err := testbed.ResultIPv4(res)
	if err != nil {
		p.t.Fatal(err)
	}
	p.bAddr = pfx.Addr()
	if err := p.node.Del(p.ctx, adoptNetwork, a); err != nil {
		p.t.Fatalf("late DEL of A: %v", err)
	}
	snap, err := p.c.Calico(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	if al, held := snap.Lookup(p.bAddr); held {
		p.t.Fatalf("the late DEL of A left B's %s allocated (handle %s): the story needs Calico 2.x", p.bAddr, al.Handle)
	}
}

func (p *adoptProof) installSafeIPAM(st *testbed.Store) {
	p.t.Helper()
	p.safe = p.c.SafeConfig(p.node, "pod", st)
	if err := p.c.Network(adoptNetwork, "1.0.0", p.node, p.safe).WriteConflist(p.node.ConfDir); err != nil {
		p.t.Fatal(err)
	}
}

// adopt runs `safe-ipam adopt --apply` on B's cache entry. libcni's cache
// is shared by every test on this host, so B's entry (and only it) is
// copied to a directory of this node's own.
func (p *adoptProof) adopt() {
	p.t.Helper()
	cache := filepath.Join(p.c.Dir, "cni-results")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		p.t.Fatal(err)
	}
	entries, err := filepath.Glob(filepath.Join("/var/lib/cni/results", "*-"+p.b.ContainerID()+"-*"))
	if err != nil || len(entries) == 0 {
		p.t.Fatalf("libcni cached no result for B (%v)", err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(e)
		if err != nil {
			p.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cache, filepath.Base(e)), data, 0o600); err != nil {
			p.t.Fatal(err)
		}
	}
	out, code := p.safeIPAM("adopt", "--conf", p.conflist(), "--cni-cache", cache, "--apply")
	if code != 1 || !strings.Contains(out, "early-release") || !strings.Contains(out, "written") || !strings.Contains(out, p.bAddr.String()) {
		p.t.Fatalf("adopt --apply: exit %d; want 1 with B's %s adopted as an early release:\n%s", code, p.bAddr, out)
	}
	p.t.Logf("adopt --apply:\n%s", out)
}

// cycleBlockTwice starts new pods through safe-ipam until two blocks'
// worth run. A fenced ADD (11) is retried by the runtime in a new
// sandbox, and the failed one is deleted, as kubelet does.
func (p *adoptProof) cycleBlockTwice() {
	p.t.Helper()
	for i := 0; len(p.others) < 2*testbed.BlockAddrs; i++ {
		pod := testbed.Pod{Namespace: "default", Name: fmt.Sprintf("app-%d", len(p.others))}
		sb := p.sandbox(pod)
		_, err := p.node.Add(p.ctx, adoptNetwork, sb)
		var cmdErr *testbed.CommandError
		switch {
		case err == nil:
			p.others = append(p.others, sb)
		case errors.As(err, &cmdErr) && strings.Contains(cmdErr.Message, "quarantined"):
			p.fenced++
			p.t.Logf("fenced: %s", cmdErr.Message)
			if err := p.node.Del(p.ctx, adoptNetwork, sb); err != nil {
				p.t.Fatalf("DEL of the fenced sandbox: %v", err)
			}
			p.requireAllocated("after the fenced sandbox's DEL")
		default:
			p.t.Fatalf("ADD of %s: %v", pod, err)
		}
		if i > 4*testbed.BlockAddrs {
			p.t.Fatalf("too many failed ADDs")
		}
	}
}

// requireAllocated: Calico keeps B's address allocated while B runs.
func (p *adoptProof) requireAllocated(when string) {
	p.t.Helper()
	snap, err := p.c.Calico(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, held := snap.Lookup(p.bAddr); !held && p.fenced > 0 {
		p.t.Fatalf("%s: B's %s is free in Calico: the next ADD can hand it out", when, p.bAddr)
	}
}

// auditShowsQuarantine: the audit names the quarantine. It reads records
// from etcd only, so it sees quarantines of the etcd store.
func (p *adoptProof) auditShowsQuarantine() {
	p.t.Helper()
	if p.safe.Store.Type != "etcd" {
		return
	}
	out, _ := p.safeIPAM("audit", "--conf", p.conflist(), "--cni-cache=")
	if !strings.Contains(out, "quarantine") || !strings.Contains(out, p.bAddr.String()) {
		p.t.Errorf("audit does not report the quarantine of %s:\n%s", p.bAddr, out)
	}
}

func (p *adoptProof) deleteB() {
	p.t.Helper()
	if err := p.node.Del(p.ctx, adoptNetwork, p.b); err != nil {
		p.t.Fatalf("DEL of B: %v", err)
	}
	snap, err := p.c.Calico(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	if al, held := snap.Lookup(p.bAddr); held {
		p.t.Errorf("after B's DEL, its %s is still allocated under %s: the quarantine leaked", p.bAddr, al.Handle)
	}
}

func (p *adoptProof) deleteAllAndRequireNothingLeft() {
	p.t.Helper()
	for _, sb := range p.others {
		if err := p.node.Del(p.ctx, adoptNetwork, sb); err != nil {
			p.t.Fatalf("DEL of %s: %v", sb.Pod, err)
		}
	}
	leaks, err := p.c.Leftovers(p.ctx, adoptNetwork, p.safe)
	if err != nil {
		p.t.Fatal(err)
	}
	if len(leaks) > 0 {
		p.t.Errorf("after every DEL, still held: %v", leaks)
	}
}

func (p *adoptProof) conflist() string {
	return filepath.Join(p.node.ConfDir, adoptNetwork+".conflist")
}

// safeIPAM runs an admin command of the built binary; stdout and stderr
// together, and the exit code.
func (p *adoptProof) safeIPAM(args ...string) (string, int) {
	p.t.Helper()
	return runSafeIPAM(p.ctx, p.t, p.c.Bin, args...)
}

// runSafeIPAM runs safe-ipam (an admin command, which it hands to
// safe-ipam-admin) and returns its output and exit code.
func runSafeIPAM(ctx context.Context, t *testing.T, bin testbed.Binaries, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin.Path(testbed.SafeIPAM), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("safe-ipam %s: %v", args[0], err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

const adoptNetwork = "k8s-pod-network"
