package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
)

// Verb is a CNI command the runtime issues.
type Verb string

// The verbs the histories use.
const (
	Add Verb = "ADD"
	Del Verb = "DEL"
	GC  Verb = "GC"
	// Outside is not the runtime's: an actor behind safe-ipam's back frees
	// the address of Att, a live attachment (see Outside*).
	Outside Verb = "OUTSIDE"
	// NodeDeath is not the runtime's either: Node dies, and
	// kube-controllers frees its addresses and blocks and deletes its
	// Calico Node. With a file store its records go with its disk.
	NodeDeath Verb = "NODE-DEATH"
	// DeadNodesGC is the DaemonSet's `safe-ipam gc --dead-nodes --apply`
	// on Node.
	DeadNodesGC Verb = "GC-DEAD-NODES"
	// NodesLost is not the runtime's: Calico's Nodes vanish from the
	// listing gc --dead-nodes reads (a wrong prefix, a datastore restored
	// from an old backup), while every node runs; NodesBack restores them.
	NodesLost Verb = "NODES-LOST"
	NodesBack Verb = "NODES-BACK"
	// DeadNodesSighting is one sweep of `safe-ipam gc --dead-nodes --apply`
	// on Node, with no grace: it notes the nodes it finds gone, and
	// releases none of their records yet (the rulebook needs two
	// sightings); an ADD given a dead holder's address may settle it then.
	DeadNodesSighting Verb = "GC-DEAD-NODES-SIGHTING"
	// Uninstall is `safe-ipam uninstall` on Node: its records are
	// forgotten and their quarantines released (guard.Forget, as uninstall
	// does), and its calls go to calico-ipam alone until Reinstall.
	Uninstall Verb = "UNINSTALL"
	// UninstallRead is the first half of an Uninstall on Node: it reads
	// the records, which the next Uninstall of Node forgets, so calls in
	// between race its forget.
	UninstallRead Verb = "UNINSTALL-READ"
	// Reinstall is `safe-ipam install` on Node again, which indexes the
	// node's records (store.Reindex).
	Reinstall Verb = "REINSTALL"
	// Adopt is `safe-ipam adopt` on Node: Att, which runs with no record
	// (its ADD ran while safe-ipam was uninstalled), is recorded under the
	// handle Calico keeps its address under (a Calico 2.x pod's: its pod
	// name's).
	Adopt Verb = "ADOPT"
	// Upgrade is a rollout of safe-ipam over records an older version
	// wrote without address index entries: every entry is removed, then
	// install indexes the records again, as the new DaemonSet's start does.
	Upgrade Verb = "UPGRADE"
	// AffinityMove is not the runtime's: the blocks affine to Lender become
	// Node's (Calico hands a block to another node; Kubernetes datastore
	// only), so Node's ADDs are given the addresses Lender's pods held.
	AffinityMove Verb = "AFFINITY-MOVE"
	// GCLoops is the DaemonSet's `gc --dead-nodes --every` loops on node2
	// and node3 while Fault plays out in their election; Node's loop must
	// release the dead node's records (election.go).
	GCLoops Verb = "GC-LOOPS"
)

// How an outside actor frees a live attachment's address.
const (
	// OutsideCalicoDel: a plain calico-ipam DEL of the attachment's
	// container with pod identity, from a node where calico-ipam runs
	// without safe-ipam (a stale conflist).
	OutsideCalicoDel = "calico-ipam-del"
	// OutsideIPAMRelease: the address released directly in Calico's data,
	// as `calicoctl ipam release --ip` does.
	OutsideIPAMRelease = "ipam-release"
)

// Call is one CNI invocation as a container runtime makes it.
type Call struct {
	Verb Verb
	Node string
	// Att is the attachment of ADD and DEL.
	Att *Attachment
	// Valid lists the attachments GC must keep.
	Valid []*Attachment
	// CrashAt arms a crash point: safe-ipam kills itself there.
	CrashAt guard.Step
	// Outage says etcd is down for the whole call, so it gets the short
	// timeout.
	Outage bool
	// Hold makes calico-ipam wait in ADD until a Partition step has cut
	// the store's answers (needs Setup.StoreBehindProxy).
	Hold    bool
	holdDir string
	// By says how an Outside call frees the address.
	By string
	// Lender is the node whose block a Borrow takes from; Name is a
	// NodeRename's new Calico name, or a FormerGC's former one.
	Lender, Name string
	// Fault is the election fault a GCLoops call plays.
	Fault string
}

func (c Call) String() string {
	s := string(c.Verb) + "@" + c.Node
	if c.Att != nil {
		s += " " + c.Att.String()
	}
	if c.Verb == GC || c.Verb == Repair || c.Verb == FormerGC {
		names := make([]string, len(c.Valid))
		for i, a := range c.Valid {
			names[i] = a.ContainerID
		}
		s += " valid=[" + strings.Join(names, ",") + "]"
	}
	if c.CrashAt != "" {
		s += " crash-at=" + string(c.CrashAt)
	}
	if c.By != "" {
		s += " by " + c.By
	}
	if c.Lender != "" {
		s += " from " + c.Lender + "'s block"
	}
	if c.Name != "" {
		s += " name=" + c.Name
	}
	if c.Fault != "" {
		s += " fault=" + c.Fault
	}
	return s
}

// Outcome is what the runtime sees of a call.
type Outcome struct {
	// IPs are the addresses of a successful ADD.
	IPs []netip.Addr
	// Result is the successful ADD's result, kept for a later DEL's
	// prevResult.
	Result json.RawMessage
	// Code is the CNI error code of a failure, 0 on success.
	Code uint
	Msg  string
	// Crashed means the process died by SIGKILL at its crash point.
	Crashed bool
	Stderr  string
}

// OK says the call succeeded.
func (o Outcome) OK() bool { return o.Code == 0 && !o.Crashed }

func (o Outcome) String() string {
	switch {
	case o.Crashed:
		return "crashed"
	case o.OK() && len(o.IPs) > 0:
		return fmt.Sprintf("ok %v", o.IPs)
	case o.OK():
		return "ok"
	}
	return fmt.Sprintf("error %d: %s", o.Code, o.Msg)
}

// hangLimit bounds one invocation; reaching it is a harness failure, not
// an outcome, since every timeout inside is far shorter.
const hangLimit = 2 * time.Minute

// Invoke runs the plugin as the runtime would: safe-ipam, or calico-ipam
// itself for the control. An error means the harness could not tell what
// happened.
func (c *Cluster) Invoke(ctx context.Context, call Call) (Outcome, error) {
	if out, ok, err := c.machineCall(ctx, call); ok {
		return out, err
	}
	switch {
	case call.Verb == Outside && call.By == OutsideIPAMRelease:
		return Outcome{}, c.releaseInCalico(ctx, call.Att)
	case call.Verb == NodeDeath:
		return Outcome{}, c.kill(ctx, call.Node)
	case call.Verb == NodesLost, call.Verb == NodesBack:
		return Outcome{}, c.loseNodes(ctx, call.Verb == NodesLost)
	case call.Verb == DeadNodesGC, call.Verb == DeadNodesSighting:
		return c.deadNodesGC(ctx, call)
	case call.Verb == GCLoops:
		return c.gcLoops(ctx, call)
	case call.Verb == AffinityMove:
		return Outcome{}, c.moveAffinity(ctx, call.Lender, call.Node)
	case call.Verb == UninstallRead:
		return Outcome{}, c.readForUninstall(ctx, call.Node)
	case call.Verb == Uninstall:
		return c.uninstall(ctx, call)
	case call.Verb == Reinstall:
		c.uninstalled[call.Node] = false
		return Outcome{}, c.reindex(ctx, call.Node)
	case call.Verb == Upgrade:
		return Outcome{}, c.upgrade(ctx)
	case call.Verb == Adopt:
		return Outcome{}, c.adopt(ctx, call.Att)
	}
	stdin, err := c.stdin(call)
	if err != nil {
		return Outcome{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, hangLimit)
	defer cancel()
	prog := SafeIPAM
	if !c.setup.Safe() || call.Verb == Outside || c.uninstalled[call.Node] {
		prog = CalicoIPAM
	}
	cmd := c.command(ctx, call.Node, c.binaries().Path(prog))
	cmd.Env = c.env(call)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return Outcome{}, fmt.Errorf("%s hung for %s: %s", call, hangLimit, stderr.String())
	}
	return outcome(call, runErr, stdout.Bytes(), stderr.String())
}

func outcome(call Call, runErr error, stdout []byte, stderr string) (Outcome, error) {
	out := Outcome{Stderr: stderr}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		return out, fmt.Errorf("running %s: %w", call, runErr)
	}
	if exitErr != nil {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			if call.CrashAt == "" {
				return out, fmt.Errorf("%s was killed with no crash point armed: %s", call, stderr)
			}
			out.Crashed = true
			return out, nil
		}
		var cniErr types.Error
		if err := json.Unmarshal(stdout, &cniErr); err != nil || cniErr.Code == 0 {
			return out, fmt.Errorf("%s failed without a CNI error (%v): stdout %q stderr %q", call, runErr, stdout, stderr)
		}
		out.Code, out.Msg = cniErr.Code, cniErr.Msg
		return out, nil
	}
	if call.Verb == Add {
		ips, err := resultIPs(stdout)
		if err != nil {
			return out, fmt.Errorf("%s: %w", call, err)
		}
		out.IPs, out.Result = ips, append(json.RawMessage(nil), stdout...)
	}
	return out, nil
}

// resultIPs reads the addresses of an ADD result (CNI 1.x form).
func resultIPs(stdout []byte) ([]netip.Addr, error) {
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil {
		return nil, fmt.Errorf("decoding ADD result %q: %w", stdout, err)
	}
	if len(res.IPs) == 0 {
		return nil, fmt.Errorf("ADD result has no address: %s", stdout)
	}
	ips := make([]netip.Addr, 0, len(res.IPs))
	for _, ip := range res.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			return nil, fmt.Errorf("ADD result address %q: %w", ip.Address, err)
		}
		ips = append(ips, p.Addr())
	}
	return ips, nil
}

func (c *Cluster) timeout(call Call) time.Duration {
	switch {
	case call.Outage:
		return outageTimeout
	case call.Hold:
		return partitionTimeout
	}
	return normalTimeout
}

// env is the environment of one call. kubelet passes pod identity in
// CNI_ARGS; that is what lets calico-ipam key by pod name.
func (c *Cluster) env(call Call) []string {
	lock := "none"
	if c.setup.HostLock {
		lock = filepath.Join(c.work, call.Node, "calico-ipam.lock")
	}
	handles := "modern"
	if c.setup.Generation == Legacy {
		handles = "legacy"
	}
	verb := call.Verb
	if verb == Outside {
		verb = Del // a plain calico-ipam DEL
	}
	env := []string{
		"CNI_COMMAND=" + string(verb),
		"CNI_PATH=" + c.binaries().Dir,
		"PATH=" + os.Getenv("PATH"),
		"CALICO_SIM_HANDLES=" + handles,
		"CALICO_IPAM_LOCK_FILE=" + lock,
		"CALICO_SIM_TIMEOUT=" + c.timeout(call).String(),
	}
	if call.CrashAt != "" {
		env = append(env, "SAFE_IPAM_CRASH_AT="+string(call.CrashAt))
	}
	if call.holdDir != "" {
		env = append(env, "CHAOS_HOLD_DIR="+call.holdDir)
	}
	if a := call.Att; a != nil {
		env = append(env,
			"CNI_CONTAINERID="+a.ContainerID,
			"CNI_NETNS=/var/run/netns/chaos-"+a.ContainerID, // IPAM never enters it
			"CNI_IFNAME="+a.IfName,
			"CNI_ARGS="+a.cniArgs())
	}
	return env
}

// stdin is the config of one call: DEL carries the ADD's result as
// prevResult when the runtime has it; GC carries the valid attachments.
func (c *Cluster) stdin(call Call) ([]byte, error) {
	conf := c.netConf(call.Node, c.timeout(call))
	if call.Verb == Outside || c.uninstalled[call.Node] {
		conf = c.calicoNetConf(call.Node)
	}
	switch call.Verb {
	case Del:
		if call.Att != nil && call.Att.result != nil {
			conf["prevResult"] = call.Att.result
		}
	case GC:
		valid := make([]types.GCAttachment, 0, len(call.Valid))
		for _, a := range call.Valid {
			valid = append(valid, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
		conf["cni.dev/valid-attachments"] = valid
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, fmt.Errorf("encoding config of %s: %w", call, err)
	}
	return b, nil
}
