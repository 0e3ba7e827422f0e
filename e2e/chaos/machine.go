package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
)

// A node of a history is a machine: its name there (node1, node2) is the
// one its attachments, lock, cache and store directory go by. What
// Calico calls it and what its kernel calls itself may differ from that
// name and change while pods run: a stale nodename (two machines under
// one Calico name), a Calico node rename, a host rename. The verbs below
// make those changes and run the admin tools that must cope with them.
const (
	// Borrow: Att's ADD, on Node where calico-ipam runs alone, is given
	// an address of a block Lender's affinity holds, as calico-ipam does
	// when a node's blocks are full and strictAffinity is off.
	Borrow Verb = "BORROW"
	// Repair is `safe-ipam repair --apply` on Node with a node-local
	// liveness source: a --live file listing what Node's runtime runs
	// (Valid), for Node alone.
	Repair Verb = "REPAIR"
	// HostRename gives Node's machine a new host name (hostnamectl,
	// cloud-init, DHCP), as the kernel reports it (uname).
	HostRename Verb = "HOST-RENAME"
	// NodeRename gives Node a new Calico name, Name (its nodename file
	// fixed, or the node renamed), while its pods run: its calls name it
	// so from then on.
	NodeRename Verb = "NODE-RENAME"
	// FormerGC is `safe-ipam gc --former-node Name --apply` on Node with a
	// --live file of what its runtime runs (Valid): the remedy
	// docs/operations.md gives for a Calico rename.
	FormerGC Verb = "GC-FORMER-NODE"
)

// calicoName is what Calico calls node now.
func (c *Cluster) calicoName(node string) string {
	if name, ok := c.names[node]; ok {
		return name
	}
	if c.setup.SharedName && node == Nodes[1] {
		return Nodes[0] // a stale nodename: node2's machine says node1
	}
	return node
}

// calicoNames are the names records may be kept under: each node's
// current one, and the former ones.
func (c *Cluster) calicoNames() []string {
	var out []string
	for _, n := range c.setup.nodes() {
		if name := c.calicoName(n); !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, name := range c.former {
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// hostName is node's host name with Setup.Hosts: each machine is a UTS
// namespace of its own.
func (c *Cluster) hostName(node string) string {
	return fmt.Sprintf("host-%s-%d", node, c.hostRenames[node])
}

// command runs program on node: with Setup.Hosts in a UTS namespace whose
// host name is node's, so that record.ThisHost (uname) reads it.
func (c *Cluster) command(ctx context.Context, node, program string, args ...string) *exec.Cmd {
	if !c.setup.Hosts {
		return exec.CommandContext(ctx, program, args...)
	}
	script := `printf %s "$0" > /proc/sys/kernel/hostname && exec "$@"`
	return exec.CommandContext(ctx, "unshare", append([]string{"--uts", "sh", "-c", script, c.hostName(node), program}, args...)...)
}

// borrow allocates for call.Att, on call.Node, an address in the first
// block call.Lender's affinity holds, under the handle calico-ipam alone
// would use, with the owner attributes its generation writes (none for
// Calico 2.x).
func (c *Cluster) borrow(ctx context.Context, call Call) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	snap, err := calicosim.State(ctx, c.cli)
	if err != nil {
		return Outcome{}, err
	}
	lender := c.calicoName(call.Lender)
	var block netip.Prefix
	for _, aff := range snap.Affinities {
		if aff.Node == lender {
			block = aff.Block
			break
		}
	}
	if !block.IsValid() {
		return Outcome{}, fmt.Errorf("%s: node %s holds no block to borrow from", call, lender)
	}
	a := call.Att
	handle, attrs := Network+"."+a.ContainerID, map[string]string{
		"node": c.calicoName(call.Node), "namespace": Namespace, "pod": a.Pod, "timestamp": time.Now().UTC().String(),
	}
	if c.setup.Generation == Legacy {
		handle, attrs = podHandle(a.Pod), nil
	}
	alloc := &calicosim.Allocator{Client: c.cli, Node: c.calicoName(call.Node)}
	asg, err := alloc.Borrow(ctx, block, handle, attrs)
	if err != nil {
		return Outcome{}, fmt.Errorf("%s: %w", call, err)
	}
	return Outcome{IPs: []netip.Addr{asg.IP}}, nil
}

// repair runs `safe-ipam repair --apply` on call.Node with a --live file
// of what its runtime runs, for that node alone.
func (c *Cluster) repair(ctx context.Context, call Call) (Outcome, error) {
	conf, live, err := c.adminFiles(call)
	if err != nil {
		return Outcome{}, err
	}
	return c.runAdmin(ctx, call, "repair", "--conf", conf, "--live", live, "--node", c.calicoName(call.Node),
		"--network", Network, "--min-age", "0s", "--settle", "10ms", "--apply")
}

// formerGC runs `safe-ipam gc --former-node` on call.Node.
func (c *Cluster) formerGC(ctx context.Context, call Call) (Outcome, error) {
	conf, live, err := c.adminFiles(call)
	if err != nil {
		return Outcome{}, err
	}
	return c.runAdmin(ctx, call, "gc", "--conf", conf, "--cni-bin-dir", c.binaries().Dir, "--live", live,
		"--former-node", call.Name, "--apply")
}

// adminFiles writes call.Node's CNI config and a --live file listing
// call.Valid as its runtime would.
func (c *Cluster) adminFiles(call Call) (conf, live string, err error) {
	dir := filepath.Join(c.work, call.Node, "admin")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	conf, live = filepath.Join(dir, "10-calico.conf"), filepath.Join(dir, "live.json")
	running := []liveness.Running{}
	for _, a := range call.Valid {
		running = append(running, liveness.Running{ContainerID: a.ContainerID, IfName: a.IfName, PodNamespace: Namespace, PodName: a.Pod})
	}
	for path, v := range map[string]any{conf: c.netConf(call.Node, normalTimeout), live: running} {
		b, err := json.Marshal(v)
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", "", err
		}
	}
	return conf, live, nil
}

// renameNode gives call.Node the Calico name call.Name, which Calico
// knows from then on (calico-node registers it); the old Node stays.
func (c *Cluster) renameNode(ctx context.Context, call Call) error {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	c.former = append(c.former, c.calicoName(call.Node))
	c.names[call.Node] = call.Name
	return calicosim.SeedNode(ctx, c.cli, call.Name)
}

// machineCall runs the verbs of this file; ok is false for any other.
func (c *Cluster) machineCall(ctx context.Context, call Call) (out Outcome, ok bool, err error) {
	switch call.Verb {
	case Borrow:
		out, err = c.borrow(ctx, call)
	case Repair:
		out, err = c.repair(ctx, call)
	case FormerGC:
		out, err = c.formerGC(ctx, call)
	case NodeRename:
		err = c.renameNode(ctx, call)
	case HostRename:
		c.hostRenames[call.Node]++
	default:
		return Outcome{}, false, nil
	}
	return out, true, err
}

// lenderNote says whose block a Borrow takes from, for the transcript.
func lenderNote(a *Attachment, lender string) string {
	return fmt.Sprintf("%s starts through calico-ipam alone on %s, whose blocks are full: Calico lends it an address of %s's block", a.Pod, a.Node, lender)
}

// RepairOverBorrowedBlockScript (issue 41, item 2.2): node2 runs
// calico-ipam alone, and its pod web-1 borrows an address of node1's
// block (node2's blocks are full). `safe-ipam repair --apply` on node1,
// whose liveness source speaks for node1 alone, must leave web-1's
// address allocated: the block's affinity is not the allocation's node,
// and with Calico 2.x nothing else names one (invariant 1). web-2, which
// node1's runtime forgot, is what repair may fix there.
func RepairOverBorrowedBlockScript(gen Generation) *Script {
	s := &Script{
		Name:  "repair/borrowed-block/" + string(gen),
		Setup: Setup{Generation: gen, Store: EtcdStore, Nodes: 2, Pool: SinglePool, HostLock: true, SharedPrefix: true, Hosts: true},
	}
	s.then(func(*Model) Step { return LifeStep(Uninstall, "node2") })
	s.start("web-0", node1, "", Succeeds)
	s.then(func(m *Model) Step {
		a := m.Incarnate("web-1", "node2", s.containerID("web-1"))
		return single(Call{Verb: Borrow, Node: "node2", Att: a, Lender: node1}, Succeeds, lenderNote(a, node1))
	})
	s.start("web-2", node1, "", Succeeds).forget(2)
	s.then(func(m *Model) Step {
		return single(Call{Verb: Repair, Node: node1, Valid: m.Valid(node1)}, AnyOutcome, "safe-ipam repair --apply on node1, with node1's runtime as its source")
	})
	return s.start("web-3", node1, "", Succeeds)
}

// RepairStaleNodenameScript (issue 41, item 2.1): node2's machine runs
// under node1's Calico name (a stale nodename), so the etcd store keeps
// both machines' records under node1. web-1's address, on node2, is freed
// behind its back and handed to web-4 on node1, which is fenced: the
// allocation is quarantined with web-1's record. `safe-ipam repair
// --apply` on node1 reads node1's runtime, which says nothing of node2's
// pods: it must keep web-1's record (another host wrote it) and its
// quarantine, or web-4's retry gets web-1's address (invariant 1).
func RepairStaleNodenameScript() *Script {
	s := &Script{
		Name:  "repair/stale-nodename",
		Setup: Setup{Generation: Modern, Store: EtcdStore, Nodes: 2, Pool: SinglePool, HostLock: true, SharedPrefix: true, Hosts: true, SharedName: true},
	}
	s.start("web-0", node1, "", Succeeds).start("web-1", "node2", "", Succeeds)
	s.outside(1, OutsideIPAMRelease)
	s.start("web-2", node1, "", Succeeds).start("web-3", node1, "", Succeeds)
	s.start("web-4", node1, "", TryAgain)
	s.then(func(m *Model) Step {
		return single(Call{Verb: Repair, Node: node1, Valid: m.Valid(node1)}, AnyOutcome, "safe-ipam repair --apply on node1, with node1's runtime as its source")
	})
	s.retryAdd("web-4", "", TryAgain)
	s.then(func(m *Model) Step {
		a := m.Retire("web-1")
		return single(Call{Verb: Del, Node: "node2", Att: a}, Succeeds, "web-1 is deleted")
	})
	return s.retryAdd("web-4", "", Succeeds)
}

// UninstallStaleNodenameScript: node2's machine runs under node1's Calico
// name (a stale nodename), and safe-ipam is uninstalled from it. Only its
// own records may go: web-0's, which node1's machine wrote, keeps fencing
// web-0's address when it is freed behind web-0's back, or web-4 gets it
// (invariant 1).
func UninstallStaleNodenameScript() *Script {
	s := &Script{
		Name:  "uninstall/stale-nodename",
		Setup: Setup{Generation: Modern, Store: EtcdStore, Nodes: 2, Pool: SinglePool, HostLock: true, SharedPrefix: true, Hosts: true, SharedName: true},
	}
	s.start("web-0", node1, "", Succeeds).start("web-1", "node2", "", Succeeds)
	s.then(func(*Model) Step { return LifeStep(Uninstall, "node2") })
	s.outside(0, OutsideIPAMRelease)
	s.start("web-2", node1, "", Succeeds).start("web-3", node1, "", Succeeds)
	return s.start("web-4", node1, "", TryAgain)
}

// HostRenameScript (issue 41, item 2.5): node1's host name changes
// (hostnamectl, cloud-init, DHCP) across the restart in which its runtime
// forgot web-1. A file store holds this machine's records whatever its
// name, so GC must collect web-1's record (invariant 2), and keep web-0's.
func HostRenameScript() *Script {
	s := &Script{
		Name:  "rename/host/file",
		Setup: Setup{Generation: Modern, Store: FileStore, Nodes: 1, Pool: WidePool, HostLock: true, Hosts: true},
	}
	s.start("web-0", node1, "", Succeeds).start("web-1", node1, "", Succeeds).forget(1)
	s.then(func(*Model) Step {
		return single(Call{Verb: HostRename, Node: node1}, Succeeds, "node1's machine restarts under a new host name")
	})
	return s.gc(node1, "", Succeeds).start("web-2", node1, "", Succeeds)
}

// NodeRenameScript (issue 41, item 2.4): node1 gets a new Calico name
// while web-0 runs; web-1's sandbox was lost in the restart. Their records
// stay under the old name, where the node's GC no longer looks. The
// remedy of docs/operations.md, `gc --former-node`, must release web-1's
// record and keep web-0's while it runs; web-0's DEL, under the new name,
// must find its record under the old one and release it (invariants 2 and
// 4).
func NodeRenameScript() *Script {
	s := &Script{
		Name:  "rename/calico-node/etcd",
		Setup: Setup{Generation: Modern, Store: EtcdStore, Nodes: 1, Pool: WidePool, HostLock: true, SharedPrefix: true, Hosts: true},
	}
	s.start("web-0", node1, "", Succeeds).start("web-1", node1, "", Succeeds).forget(1)
	s.then(func(*Model) Step {
		return single(Call{Verb: NodeRename, Node: node1, Name: "node1-renamed"}, Succeeds, "node1 restarts under a new Calico name")
	})
	s.start("web-2", node1, "", Succeeds)
	s.then(func(m *Model) Step {
		return single(Call{Verb: FormerGC, Node: node1, Name: node1, Valid: m.Valid(node1)}, Succeeds, "safe-ipam gc --former-node node1 --apply on the renamed node")
	})
	return s.then(func(m *Model) Step {
		a := m.Retire("web-0")
		return single(Call{Verb: Del, Node: node1, Att: a}, Succeeds, "web-0 is deleted")
	})
}

// MachineScripts are the histories of machines whose names change or
// are shared, with the admin tools that must cope: repair, gc
// --former-node.
func MachineScripts() []func() *Script {
	return []func() *Script{
		func() *Script { return RepairOverBorrowedBlockScript(Legacy) },
		func() *Script { return RepairOverBorrowedBlockScript(Modern) },
		RepairStaleNodenameScript,
		UninstallStaleNodenameScript,
		HostRenameScript,
		NodeRenameScript,
	}
}
