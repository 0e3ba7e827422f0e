package lookup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/guard"
)

// ReadEnv, set in a CNI build's environment, asks it for one read of
// Calico's etcd (a Request on stdin, a Response on stdout) instead of a
// verb. The CNI binary's lean build, which does not link the etcd client,
// reads Calico's etcd this way, through the etcd build beside it: only on
// the verbs' rare paths, so an ordinary pod's calls never pay the etcd
// client's init.
const ReadEnv = "SAFE_IPAM_READ_CALICO_ETCD"

// ServeTimeout bounds one read in the etcd build: connecting, then reading.
const ServeTimeout = 2 * Timeout

// The reads a Request asks for.
const (
	opNode       = "node"
	opAllocation = "allocation"
	opHandle     = "handle"
)

// Request is one read of Calico's etcd.
type Request struct {
	Calico config.Calico `json:"calico"`
	Op     string        `json:"op"`
	Node   string        `json:"node,omitempty"`
	IP     netip.Addr    `json:"ip,omitzero"`
	Handle string        `json:"handle,omitempty"`
}

// Response is its answer: the read's result, the exposure warnings of the
// connection it made, or the error that stopped it.
type Response struct {
	Known      bool                            `json:"known,omitempty"`
	Allocation guard.Allocation                `json:"allocation"`
	Held       map[netip.Addr]guard.Allocation `json:"held,omitempty"`
	Warnings   [][2]string                     `json:"warnings,omitempty"`
	Error      string                          `json:"error,omitempty"`
}

// Beside reads Calico's etcd by running bin, the CNI binary's etcd build,
// once per read, with ReadEnv set.
type Beside struct {
	bin  string
	conf config.Calico
	warn Warn
}

// NewBeside is Calico's etcd read through bin; it runs nothing yet.
func NewBeside(bin string, c config.Calico, warn Warn) *Beside {
	return &Beside{bin: bin, conf: c, warn: warn.orNobody()}
}

// Close closes nothing: each read's process ends with it.
func (b *Beside) Close() error { return nil }

// NodeKnown says whether Calico's etcd holds the Node called node.
func (b *Beside) NodeKnown(ctx context.Context, node string) (bool, error) {
	resp, err := b.read(ctx, Request{Op: opNode, Node: node})
	return resp.Known, err
}

// Allocation reads what Calico records of ip; a zero Allocation when ip
// is not allocated.
func (b *Beside) Allocation(ctx context.Context, ip netip.Addr) (guard.Allocation, error) {
	resp, err := b.read(ctx, Request{Op: opAllocation, IP: ip})
	return resp.Allocation, err
}

// HandleAllocations lists the addresses Calico keeps under handle.
func (b *Beside) HandleAllocations(ctx context.Context, handle string) (map[netip.Addr]guard.Allocation, error) {
	resp, err := b.read(ctx, Request{Op: opHandle, Handle: handle})
	return resp.Held, err
}

// read runs one Request in the etcd build, bounded as the in-process
// reads are (connecting, then reading) and by ctx.
func (b *Beside) read(ctx context.Context, req Request) (Response, error) {
	if !filepath.IsAbs(b.bin) {
		// The node decides what runs: a bare name would be looked up on
		// PATH (the binary could not tell its own directory).
		return Response{}, types.NewError(types.ErrPluginNotAvailable,
			fmt.Sprintf("reading Calico's etcd: %s is not a path beside this binary (it cannot tell its own directory); safe-ipam never runs one found on PATH", b.bin), "")
	}
	req.Calico = b.conf
	in, err := json.Marshal(req)
	if err != nil {
		return Response{}, fmt.Errorf("reading Calico's etcd: %w", err)
	}
	// A little more than the read's own bounds (ServeTimeout), so that its
	// error and warnings come back rather than a kill.
	ctx, cancel := context.WithTimeout(ctx, ServeTimeout+2*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.bin)
	cmd.Env = append(os.Environ(), ReadEnv+"=1") // proxies and GODEBUG, as the in-process reads had
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Response{}, fmt.Errorf("reading Calico's etcd through %s: %w %s", b.bin, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var resp Response
	if err := json.Unmarshal(out, &resp); err != nil {
		return Response{}, fmt.Errorf("reading Calico's etcd through %s: its answer: %w", b.bin, err)
	}
	for _, w := range resp.Warnings {
		b.warn(w[0], w[1])
	}
	if resp.Error != "" {
		return Response{}, fmt.Errorf("%s", resp.Error)
	}
	return resp, nil
}

// Serve answers the Request on in with a reader of Calico's etcd that
// open makes (the etcd build's), writing the Response on out: what a
// build run with ReadEnv does.
func Serve(ctx context.Context, in io.Reader, out io.Writer, open func(config.Calico, Warn) Reader) error {
	var req Request
	var resp Response
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		resp.Error = fmt.Sprintf("a read of Calico's etcd that does not parse: %v", err)
		return json.NewEncoder(out).Encode(resp)
	}
	r := open(req.Calico, func(transport, why string) { resp.Warnings = append(resp.Warnings, [2]string{transport, why}) })
	defer r.Close()
	var err error
	switch req.Op {
	case opNode:
		resp.Known, err = r.NodeKnown(ctx, req.Node)
	case opAllocation:
		resp.Allocation, err = r.Allocation(ctx, req.IP)
	case opHandle:
		resp.Held, err = r.HandleAllocations(ctx, req.Handle)
	default:
		err = fmt.Errorf("unknown read %q of Calico's etcd", req.Op)
	}
	if err != nil {
		resp.Error = err.Error()
	}
	return json.NewEncoder(out).Encode(resp)
}
