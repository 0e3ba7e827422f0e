// Package statefulset runs the story behind safe-ipam on real parts: a
// StatefulSet pod is replaced, the old sandbox's DEL arrives late, and
// Calico's legacy handle (namespace.podname, shared by every incarnation)
// makes that DEL free the new pod's address, which Calico then hands to
// another pod. The e2e tests assert on its report; the demo prints it.
package statefulset

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// Network is the network name the story uses, Calico's usual one.
const Network = "k8s-pod-network"

// Pod is the StatefulSet pod whose two incarnations the story follows.
var Pod = testbed.Pod{Namespace: "default", Name: "web-0"}

// Report is what one run observed, from Calico's data in etcd and from
// inside the netns.
type Report struct {
	// Label says who allocated: calico-ipam alone, or safe-ipam in front.
	Label string
	// Old and New are the two incarnations of web-0; Old's DEL is late.
	Old, New         testbed.Sandbox
	OldAddr, NewAddr netip.Addr
	// Right after the late DEL of Old, per Calico's data:
	NewFreedByLateDel    bool
	OldReleasedByLateDel bool
	// Others are the pods added afterwards to cycle the block.
	Others []testbed.Sandbox
	// Rows describe every sandbox after the cycle, Old first.
	Rows []Row
	// Duplicates are addresses held by more than one netns after the cycle.
	Duplicates map[netip.Addr][]testbed.Sandbox
	// Records is how many attachments safe-ipam records after the cycle,
	// across every node's store: a check that the store in use is the
	// one configured. Always 0 for calico-ipam alone.
	Records int
	// NewAddrHandle is the Calico handle holding New's address after the
	// cycle, "" if it is free.
	NewAddrHandle string
	// Leaks are what remains once every sandbox is deleted: Calico
	// allocations, handle documents and safe-ipam records.
	Leaks []string
}

// Row is one sandbox as the table shows it.
type Row struct {
	Sandbox testbed.Sandbox
	Role    string
	// Addr is what the netns holds; invalid when it holds nothing.
	Addr netip.Addr
	// CalicoHandle holds Addr in Calico's data; "" when Addr is free there.
	CalicoHandle string
	// AlsoHeldBy are the other sandboxes whose netns hold Addr.
	AlsoHeldBy []testbed.Sandbox
}

// Options choose one run of the story.
type Options struct {
	// Safe puts safe-ipam (delegateHandles: pod) in front of calico-ipam;
	// without it calico-ipam runs alone, the control.
	Safe bool
	// Store is safe-ipam's store; nil gives each node a file store.
	Store *testbed.Store
	// Move starts the new incarnation on node2: the pod moved there and
	// the late DEL arrives on node1. Both nodes share Calico's etcd.
	Move bool
}

// Run seeds the cluster and plays the story. Every node runs Calico 2.x
// handles.
func Run(ctx context.Context, c *testbed.Cluster, opt Options) (*Report, error) {
	nodes := []string{"node1"}
	if opt.Move {
		nodes = append(nodes, "node2")
	}
	if err := c.Seed(ctx, nodes...); err != nil {
		return nil, err
	}
	s := &story{c: c}
	for _, name := range nodes {
		n := c.Node(name, testbed.Legacy)
		var sc *testbed.SafeConfig
		if opt.Safe {
			sc = c.SafeConfig(n, "pod", opt.Store)
		}
		net := c.Network(Network, "1.0.0", n, sc)
		if err := net.WriteConflist(n.ConfDir); err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, n)
		s.nets = append(s.nets, net)
	}
	s.r = &Report{Label: s.nets[0].Label()}
	steps := []func(context.Context) error{s.addBothIncarnations, s.lateDel, s.cycleBlock, s.observe, s.deleteAll}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return s.r, fmt.Errorf("%s: %w", s.r.Label, err)
		}
	}
	return s.r, nil
}

type story struct {
	c *testbed.Cluster
	// nodes[0] runs the old incarnation; the last node runs the new one
	// and the pods that cycle its block.
	nodes []*testbed.Node
	nets  []testbed.Network
	r     *Report
	// attached are the sandboxes to DEL at the end, with their node.
	attached []attachment
}

type attachment struct {
	node *testbed.Node
	sb   testbed.Sandbox
}

func (s *story) oldNode() *testbed.Node { return s.nodes[0] }
func (s *story) newNode() *testbed.Node { return s.nodes[len(s.nodes)-1] }

func (s *story) sandbox(ctx context.Context, pod testbed.Pod, suffix string) (testbed.Sandbox, error) {
	ns, err := s.c.Netns.Add(ctx, pod.Name+suffix)
	if err != nil {
		return testbed.Sandbox{}, err
	}
	return testbed.Sandbox{Pod: pod, Netns: ns}, nil
}

// add creates a sandbox and attaches it, returning its address.
func (s *story) add(ctx context.Context, node *testbed.Node, pod testbed.Pod, suffix string) (testbed.Sandbox, netip.Addr, error) {
	sb, err := s.sandbox(ctx, pod, suffix)
	if err != nil {
		return sb, netip.Addr{}, err
	}
	res, err := node.Add(ctx, Network, sb)
	if err != nil {
		return sb, netip.Addr{}, err
	}
	s.attached = append(s.attached, attachment{node, sb})
	p, err := testbed.ResultIPv4(res)
	return sb, p.Addr(), err
}

func (s *story) addBothIncarnations(ctx context.Context) error {
	var err error
	if s.r.Old, s.r.OldAddr, err = s.add(ctx, s.oldNode(), Pod, "-a"); err != nil {
		return fmt.Errorf("ADD of the old incarnation: %w", err)
	}
	if s.r.New, s.r.NewAddr, err = s.add(ctx, s.newNode(), Pod, "-b"); err != nil {
		return fmt.Errorf("ADD of the new incarnation: %w", err)
	}
	return nil
}

// lateDel deletes the old incarnation while the new one runs, with the
// pod's identity in CNI_ARGS, as kubelet sends it.
func (s *story) lateDel(ctx context.Context) error {
	if err := s.oldNode().Del(ctx, Network, s.r.Old); err != nil {
		return fmt.Errorf("late DEL of the old incarnation: %w", err)
	}
	s.attached = slices.DeleteFunc(s.attached, func(a attachment) bool { return a.sb == s.r.Old })
	snap, err := s.c.Calico(ctx)
	if err != nil {
		return err
	}
	_, newHeld := snap.Lookup(s.r.NewAddr)
	_, oldHeld := snap.Lookup(s.r.OldAddr)
	s.r.NewFreedByLateDel, s.r.OldReleasedByLateDel = !newHeld, !oldHeld
	return nil
}

// cycleBlock adds one block's worth of other pods: Calico hands out
// freed addresses only after the rest of the block, so by the end a freed
// address of the new incarnation has gone to one of them.
func (s *story) cycleBlock(ctx context.Context) error {
	for i := range testbed.BlockAddrs {
		pod := testbed.Pod{Namespace: "default", Name: fmt.Sprintf("app-%d", i)}
		sb, _, err := s.add(ctx, s.newNode(), pod, "")
		if err != nil {
			return fmt.Errorf("ADD of %s while cycling the block: %w", pod, err)
		}
		s.r.Others = append(s.r.Others, sb)
	}
	return nil
}

func (s *story) observe(ctx context.Context) error {
	all := append([]testbed.Sandbox{s.r.Old, s.r.New}, s.r.Others...)
	held, err := testbed.Observe(ctx, all)
	if err != nil {
		return err
	}
	snap, err := s.c.Calico(ctx)
	if err != nil {
		return err
	}
	s.r.Duplicates = held.Duplicates()
	if s.r.Records, err = s.countRecords(ctx); err != nil {
		return err
	}
	if a, ok := snap.Lookup(s.r.NewAddr); ok {
		s.r.NewAddrHandle = a.Handle
	}
	for _, sb := range all {
		row := Row{Sandbox: sb, Role: s.role(sb)}
		if addrs := held.Addrs(sb); len(addrs) > 0 {
			row.Addr = addrs[0]
			if a, ok := snap.Lookup(row.Addr); ok {
				row.CalicoHandle = a.Handle
			}
			for _, other := range held.Holders(row.Addr) {
				if other != sb {
					row.AlsoHeldBy = append(row.AlsoHeldBy, other)
				}
			}
		}
		s.r.Rows = append(s.r.Rows, row)
	}
	return nil
}

// countRecords counts distinct records in the stores of every node; nodes
// may share one (the etcd store).
func (s *story) countRecords(ctx context.Context) (int, error) {
	seen := map[string]bool{}
	for _, net := range s.nets {
		if net.Safe == nil {
			continue
		}
		recs, err := s.c.Records(ctx, Network, net.Safe.Store)
		if err != nil {
			return 0, err
		}
		for _, rec := range recs {
			seen[rec.Attachment.String()] = true
		}
	}
	return len(seen), nil
}

func (s *story) role(sb testbed.Sandbox) string {
	switch sb {
	case s.r.Old:
		return "old sandbox, late DEL"
	case s.r.New:
		return "new sandbox, running"
	}
	return "running"
}

// deleteAll DELs every sandbox still attached and records what is left.
func (s *story) deleteAll(ctx context.Context) error {
	for _, a := range slices.Backward(s.attached) {
		if err := a.node.Del(ctx, Network, a.sb); err != nil {
			return fmt.Errorf("final DEL of %s: %w", a.sb.Pod, err)
		}
	}
	s.attached = nil
	for _, net := range s.nets {
		leaks, err := s.c.Leftovers(ctx, Network, net.Safe)
		if err != nil {
			return err
		}
		s.r.Leaks = append(s.r.Leaks, leaks...)
	}
	slices.Sort(s.r.Leaks)
	s.r.Leaks = slices.Compact(s.r.Leaks)
	return nil
}
