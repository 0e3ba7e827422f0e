package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
)

// The DaemonSet's gc --dead-nodes --every loops run on every node and
// elect one per cluster to sweep, through the shared etcd store
// (ipam/admin/gc/sweeper.go). An election that goes wrong fails quietly: no
// loop errs, yet nobody sweeps, and a dead node's records fence its
// addresses for ever. The election histories run the loops as the
// DaemonSet does, as processes of the build under test, kill node1, play
// one fault in the election among the loops of node2 and node3, and
// require node3's loop to release node1's records within a bound; then
// node2 is handed node1's freed address, which must not be fenced.

// The election faults a GCLoops call plays.
const (
	// FaultDryRun: a dry-run loop (no --apply) runs on node2 for some
	// periods before node3's --apply loop starts. A dry-run loop that
	// campaigned would lead and never sweep.
	FaultDryRun = "dry-run-loop"
	// FaultFailingLeader: node2's --apply loop leads, but reaches Calico's
	// datastore at an endpoint that never answers, so its every sweep
	// fails; node3's loop starts after node2's first failed sweep. A leader
	// that kept the lead would keep node3 from sweeping for ever.
	FaultFailingLeader = "failing-leader"
	// FaultLeaderKilled: node2's --apply loop leads and notes node1 gone,
	// node3's loop starts and finds node2 leading, and node2's is killed
	// (SIGKILL, so its lease is not revoked) before the grace has passed.
	// node3's loop must take the lead once the lease expires and release,
	// going on from node2's note.
	FaultLeaderKilled = "leader-killed-mid-sweep"
	// FaultLeaselessKey: a leader key naming node2 without a lease (kept
	// by a backup restored without its leases, or written by hand) is in
	// the store when node3's loop starts. Obeyed, it would lead for ever.
	FaultLeaselessKey = "leaseless-leader-key"
	// FaultClockBehind: node2's loop notes node1 gone and stops; its clock
	// ran an hour behind, so its note says node1 went an hour before it
	// did. A process's wall clock cannot be moved from outside (Go reads
	// it through the vDSO, and time namespaces leave it alone), so the
	// harness moves the note's time back an hour, which is all a writer's
	// clock puts in a note. node3's loop must still wait for the grace to
	// pass by etcd's clock (the note's lease) before it releases.
	FaultClockBehind = "note-from-a-clock-behind"
)

// ElectionFaults are the faults the election histories play.
var ElectionFaults = []string{FaultDryRun, FaultFailingLeader, FaultLeaderKilled, FaultLeaselessKey, FaultClockBehind}

// ElectionScript: web-0 runs on node1 (etcd store, one prefix for every
// node, three nodes), node1 dies, and fault plays out among the gc loops
// of node2 and node3 until node3's loop has released node1's records.
// node2 is then handed web-0's freed address for web-1, and its ADD must
// succeed: had no sweep noted node1 gone, it would be fenced (11).
func ElectionScript(fault string) *Script {
	s := &Script{
		Name:  "election/" + fault,
		Setup: Setup{Generation: Modern, Store: EtcdStore, Nodes: 3, Pool: WidePool, HostLock: true, SharedPrefix: true},
	}
	s.start("web-0", node1, "", Succeeds)
	s.then(func(*Model) Step { return NodeDeathStep(node1) })
	s.then(func(*Model) Step {
		return single(Call{Verb: GCLoops, Node: node3, Fault: fault}, Succeeds, "the DaemonSet's gc --dead-nodes loops run on node2 and node3: "+fault)
	})
	return s.start("web-1", node2, "", Succeeds).start("web-2", node2, "", Succeeds)
}

// ElectionScripts are the election histories, one per fault.
func ElectionScripts() []func() *Script {
	out := make([]func() *Script, 0, len(ElectionFaults))
	for _, f := range ElectionFaults {
		out = append(out, func() *Script { return ElectionScript(f) })
	}
	return out
}

const (
	node2 = "node2"
	node3 = "node3"
)

// The loops' timing. The leader's lease is sweepTTL periods, but at
// least the 5 seconds etcd's election is given (etcdstore.Lead); a bound
// is counted from when the fault has played out, and is far above what
// the loops need, so that a loaded machine never fails a history.
const (
	loopPeriod = 100 * time.Millisecond
	// leaderLease is the lease of a leader at loopPeriod.
	leaderLease = 5 * time.Second
	// loopGrace is the dead-node grace of FaultLeaderKilled and
	// FaultClockBehind: long enough that node2's loop cannot release
	// before the harness stops it. Killed, node2 keeps the lead for
	// leaderLease after its note: a grace as long costs nothing there.
	loopGrace = leaderLease
	// sweepBound is how long node3's loop may take to release once the
	// fault has played out (beyond a dead leader's lease).
	sweepBound = 10 * time.Second
	// faultBound is how long the fault may take to set up (node2's loop
	// to lead, to note, to fail).
	faultBound = 10 * time.Second
	// stopBound is how long a loop may take to stop on SIGTERM.
	stopBound = 5 * time.Second
)

// gcLoops plays call.Fault among the gc loops of node2 and node3. It
// succeeds once call.Node's loop released the dead node's records (none
// of node1's is left in the store, and that loop says it released them)
// and every loop stopped when told; it fails, saying why, otherwise. An
// error is the harness's.
func (c *Cluster) gcLoops(ctx context.Context, call Call) (out Outcome, err error) {
	e := &election{c: c, ctx: ctx, call: call}
	defer func() {
		if stopErr := e.stopAll(); stopErr != nil && err == nil && out.OK() {
			out = e.failed("%v", stopErr)
		}
	}()
	why, err := e.play()
	if err != nil {
		return Outcome{}, fmt.Errorf("%s: %w", call, err)
	}
	if why != "" {
		return e.failed("%s", why), nil
	}
	return Outcome{Stderr: e.transcript()}, nil
}

// election is one GCLoops call: the loops it started.
type election struct {
	c     *Cluster
	ctx   context.Context
	call  Call
	loops []*gcLoop
	// silent is the Calico endpoint of FaultFailingLeader.
	silent net.Listener
}

// play plays the fault and waits for the sweeper's release; why says
// what went wrong, "" if nothing did.
func (e *election) play() (why string, err error) {
	switch e.call.Fault {
	case FaultDryRun:
		return e.dryRunFirst()
	case FaultFailingLeader:
		return e.failingLeader()
	case FaultLeaderKilled:
		return e.leaderKilled()
	case FaultLeaselessKey:
		return e.leaselessKey()
	case FaultClockBehind:
		return e.clockBehind()
	}
	return "", fmt.Errorf("no election fault %q", e.call.Fault)
}

func (e *election) dryRunFirst() (string, error) {
	if _, why, err := e.startUntil(node2, loopArgs{}, "node2's dry-run loop did not run five rounds", seen(round, 5)); why != "" || err != nil {
		return why, err
	}
	return e.sweeps(loopArgs{}, sweepBound, time.Time{})
}

func (e *election) failingLeader() (string, error) {
	var err error
	if e.silent, err = silentEndpoint(); err != nil {
		return "", err
	}
	// A failed sweep costs --timeout: the default would make it two
	// minutes.
	failing := loopArgs{apply: true, calico: "http://" + e.silent.Addr().String(), timeout: time.Second}
	if _, why, err := e.startUntil(node2, failing, "node2's loop never led and failed a sweep", seen(sweepFailed, 1)); why != "" || err != nil {
		return why, err
	}
	return e.sweeps(loopArgs{}, sweepBound, time.Time{})
}

func (e *election) leaderKilled() (string, error) {
	graced := loopArgs{apply: true, grace: loopGrace}
	leader, why, err := e.startUntil(node2, graced, "node2's loop never noted node1 gone", e.noted)
	if why != "" || err != nil {
		return why, err
	}
	follower, why, err := e.startUntil(e.call.Node, graced, e.call.Node+"'s loop never found node2 leading", seen(leads(node2), 1))
	if why != "" || err != nil {
		return why, err
	}
	leader.kill()
	if leader.count(released) > 0 {
		return "node2's loop released node1's records before the grace had passed", nil
	}
	return e.releasedBy(follower, leaderLease+sweepBound, time.Time{})
}

func (e *election) leaselessKey() (string, error) {
	ctx, cancel := context.WithTimeout(e.ctx, normalTimeout)
	defer cancel()
	if _, err := e.c.cli.Put(ctx, sweepsKey(e.c.etcdPrefix(node2), "leader/restored"), node2); err != nil {
		return "", err
	}
	return e.sweeps(loopArgs{}, sweepBound, time.Time{})
}

func (e *election) clockBehind() (string, error) {
	began := time.Now()
	writer, why, err := e.startUntil(node2, loopArgs{apply: true, grace: loopGrace}, "node2's loop never noted node1 gone", e.noted)
	if why != "" || err != nil {
		return why, err
	}
	if err := writer.stop(); err != nil {
		return err.Error(), nil
	}
	if writer.count(released) > 0 {
		return "node2's loop released node1's records before the grace had passed", nil
	}
	if err := e.moveNote(-time.Hour); err != nil {
		return "", err
	}
	// node2's note was written after began, its lease of the grace
	// granted then: etcd cannot have expired it before began+grace.
	return e.sweeps(loopArgs{grace: loopGrace}, loopGrace+sweepBound, began.Add(loopGrace))
}

// sweeps starts the --apply loop of the call's node and waits for it to
// release the dead node's records (releasedBy).
func (e *election) sweeps(a loopArgs, bound time.Duration, notBefore time.Time) (string, error) {
	a.apply = true
	sweeper, err := e.start(e.call.Node, a)
	if err != nil {
		return "", err
	}
	return e.releasedBy(sweeper, bound, notBefore)
}

// startUntil starts node's loop and waits up to faultBound for the fault
// to play out as cond says; why says it did not.
func (e *election) startUntil(node string, a loopArgs, why string, cond func(*gcLoop) (bool, error)) (*gcLoop, string, error) {
	l, err := e.start(node, a)
	if err != nil {
		return nil, "", err
	}
	ok, err := e.waitFor(faultBound, func() (bool, error) { return cond(l) })
	if ok || err != nil {
		return l, "", err
	}
	return l, why, nil
}

// seen holds once n lines of a loop's output match.
func seen(match func(line string) bool, n int) func(*gcLoop) (bool, error) {
	return func(l *gcLoop) (bool, error) { return l.count(match) >= n, nil }
}

// What the loops print (ipam/admin/gc/cli.go, gc.go), line by line.

// round: a round's line about dead nodes, whatever the loop did: it
// does not sweep as a dry run, or another node leads, or it swept.
func round(line string) bool {
	return strings.Contains(line, "a dry-run loop does not sweep") || strings.Contains(line, " sweeps the records of network ") ||
		strings.HasPrefix(line, "gc: ") && strings.Contains(line, " records of network ")
}

// leads: a follower's round, naming the leader.
func leads(leader string) func(string) bool {
	return func(line string) bool { return strings.Contains(line, leader+" sweeps the records of network") }
}

// released: a row of a sweep's report, for a record it released.
func released(line string) bool { return strings.HasPrefix(line, "released ") }

// sweepFailed: a sweep that could not read Calico's Nodes (only a
// leader sweeps).
func sweepFailed(line string) bool {
	return strings.HasPrefix(line, "safe-ipam gc: ") && strings.Contains(line, "Calico's datastore")
}

// releasedBy waits up to bound for sweeper's loop to release the dead
// node's records, which it must not do before notBefore (when set).
func (e *election) releasedBy(sweeper *gcLoop, bound time.Duration, notBefore time.Time) (string, error) {
	var goneAt time.Time // when the records were first seen gone: they went before
	ok, err := e.waitFor(bound, func() (bool, error) {
		left, err := e.deadRecords()
		if left == 0 && err == nil && goneAt.IsZero() {
			goneAt = time.Now()
		}
		return left == 0 && sweeper.count(released) > 0, err
	})
	if err != nil {
		return "", err
	}
	if !goneAt.IsZero() && goneAt.Before(notBefore) {
		return fmt.Sprintf("node1's records were released %s before the grace could have passed by etcd's clock", notBefore.Sub(goneAt).Round(time.Millisecond)), nil
	}
	if !ok {
		left, err := e.deadRecords()
		return fmt.Sprintf("%s's loop did not release node1's records within %s (%d left)", sweeper.node, bound, left), err
	}
	for _, l := range e.loops {
		if l != sweeper && l.count(released) > 0 {
			return fmt.Sprintf("%s's loop released records too", l.node), nil
		}
	}
	return "", nil
}

// deadRecords counts node1's records in the store.
func (e *election) deadRecords() (int, error) {
	ctx, cancel := context.WithTimeout(e.ctx, normalTimeout)
	defer cancel()
	recs, err := etcdstore.NewWithClient(e.c.cli, e.c.etcdPrefix(node1), node1, normalTimeout).List(ctx, Network)
	return len(recs), err
}

// noted says whether a sweep (of any loop) has noted node1 gone: its key
// under the store's sweeps.
func (e *election) noted(*gcLoop) (bool, error) {
	ctx, cancel := context.WithTimeout(e.ctx, normalTimeout)
	defer cancel()
	resp, err := e.c.cli.Get(ctx, sweepsKey(e.c.etcdPrefix(node1), "gone/"+node1), clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	return resp.Count > 0, nil
}

// sweepsKey is a key the sweeps of the network keep under the store's
// prefix: the layout is persistent data (ipam/store/etcdstore/keys.go).
func sweepsKey(prefix, rest string) string { return prefix + "/sweeps/" + Network + "/" + rest }

// moveNote moves the time in node1's gone-note by d, as a writer's clock
// off by d would have written it.
func (e *election) moveNote(d time.Duration) error {
	ctx, cancel := context.WithTimeout(e.ctx, normalTimeout)
	defer cancel()
	key := sweepsKey(e.c.etcdPrefix(node1), "gone/"+node1)
	resp, err := e.c.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		return fmt.Errorf("reading node1's gone-note: %v (%d keys)", err, len(resp.Kvs))
	}
	var note map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &note); err != nil {
		return fmt.Errorf("node1's gone-note %q: %w", resp.Kvs[0].Value, err)
	}
	since, ok := note["since"].(string)
	at, err := time.Parse(time.RFC3339Nano, since)
	if !ok || err != nil {
		return fmt.Errorf("node1's gone-note %q has no time the harness knows (since): update moveNote", resp.Kvs[0].Value)
	}
	note["since"] = at.Add(d).Format(time.RFC3339Nano)
	value, err := json.Marshal(note)
	if err != nil {
		return err
	}
	// Only the note changes: the key of its grace keeps its lease.
	txn, err := e.c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).Then(clientv3.OpPut(key, string(value))).Commit()
	if err == nil && !txn.Succeeded {
		err = errors.New("it changed meanwhile")
	}
	if err != nil {
		return fmt.Errorf("moving node1's gone-note: %w", err)
	}
	return nil
}

// waitFor polls cond until it holds or bound passes.
func (e *election) waitFor(bound time.Duration, cond func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(bound)
	for {
		ok, err := cond()
		if ok || err != nil {
			return ok, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if !sleep(e.ctx, 20*time.Millisecond) {
			return false, e.ctx.Err()
		}
	}
}

// loopArgs are what a loop differs in.
type loopArgs struct {
	apply bool
	grace time.Duration
	// calico, when set, is the endpoint of Calico's datastore in the
	// loop's config (the store's stays).
	calico  string
	timeout time.Duration
}

// start starts the gc loop of node, as its DaemonSet pod runs it.
func (e *election) start(node string, a loopArgs) (*gcLoop, error) {
	c := e.c
	conf := c.netConf(node, normalTimeout)
	if a.calico != "" {
		conf["etcd_endpoints"] = a.calico
	}
	data, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(c.work, node, "gc-loop.conf")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, err
	}
	args := []string{"gc", "--conf", path, "--cni-bin-dir", c.binaries().Dir, "--dead-nodes",
		"--dead-node-grace=" + a.grace.String(), "--every", loopPeriod.String()}
	if a.apply {
		args = append(args, "--apply")
	}
	if a.timeout > 0 {
		args = append(args, "--timeout", a.timeout.String())
	}
	cmd := exec.Command(c.binaries().Path(SafeIPAM), args...)
	cmd.Env = c.env(Call{Verb: GCLoops, Node: node})[1:] // an admin command, not a CNI call
	// Its own process group: a kill takes the delegate calls it runs too;
	// and a loop dies with the harness (a test killed by its timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	l := &gcLoop{node: node, cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &l.out, &l.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the gc loop of %s: %w", node, err)
	}
	go func() { l.err = cmd.Wait(); close(l.exited) }()
	e.loops = append(e.loops, l)
	return l, nil
}

// stopAll stops every loop still running, and the silent endpoint.
func (e *election) stopAll() error {
	var errs []error
	for _, l := range e.loops {
		errs = append(errs, l.stop())
	}
	if e.silent != nil {
		e.silent.Close()
	}
	return errors.Join(errs...)
}

// failed is the call's failure: why, and what the loops printed.
func (e *election) failed(format string, args ...any) Outcome {
	msg := fmt.Sprintf(format, args...)
	return Outcome{Code: 1, Msg: msg, Stderr: e.transcript() + msg + "\n"}
}

// transcript is every loop's output, each line under its node.
func (e *election) transcript() string {
	var b strings.Builder
	for _, l := range e.loops {
		for _, line := range l.lines() {
			fmt.Fprintf(&b, "%s: %s\n", l.node, line)
		}
	}
	return b.String()
}

// gcLoop is one node's gc --dead-nodes --every process.
type gcLoop struct {
	node   string
	cmd    *exec.Cmd
	out    lockedBuffer
	exited chan struct{}
	err    error // Wait's, once exited is closed
	// ended: the harness stopped or killed it.
	ended bool
}

// stop stops the loop with SIGTERM, as kubelet does: a leader revokes its
// lease, and the loop exits 0. A loop that does not stop within stopBound
// is killed, and that is an error.
func (l *gcLoop) stop() error {
	if l.ended {
		return nil
	}
	l.ended = true
	_ = l.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.exited:
		if l.err != nil {
			return fmt.Errorf("%s's loop, stopped with SIGTERM: %v", l.node, l.err)
		}
		return nil
	case <-time.After(stopBound):
		l.kill()
		return fmt.Errorf("%s's loop did not stop within %s of SIGTERM", l.node, stopBound)
	}
}

// kill SIGKILLs the loop and the delegate calls it runs, as a node's
// sudden death or an OOM kill does: a leader's lease stays until it
// expires.
func (l *gcLoop) kill() {
	l.ended = true
	_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
	<-l.exited
}

// count is how many lines of the loop's output match.
func (l *gcLoop) count(match func(line string) bool) int {
	n := 0
	for _, line := range l.lines() {
		if match(line) {
			n++
		}
	}
	return n
}

func (l *gcLoop) lines() []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(l.out.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// lockedBuffer is a process's output, read while it writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// silentEndpoint is an endpoint that accepts connections and closes
// them unanswered: no etcd's, and held for the call, so no other
// cluster's etcd can take its port meanwhile.
func silentEndpoint() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	return ln, nil
}
