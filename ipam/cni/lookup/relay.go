package lookup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

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
	Calico config.CalicoSettings `json:"calico"`
	Op     string                `json:"op"`
	Node   string                `json:"node,omitempty"`
	IP     netip.Addr            `json:"ip,omitzero"`
	Handle string                `json:"handle,omitempty"`
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

// Relayed reads Calico's etcd through bin, the CNI binary's etcd build,
// which it runs once per read (builds.AskEtcdBuild).
type Relayed struct {
	bin  string
	conf config.CalicoSettings
	warn Warn
}

// NewRelayed is Calico's etcd read through bin; it runs nothing yet.
func NewRelayed(bin string, c config.CalicoSettings, warn Warn) *Relayed {
	return &Relayed{bin: bin, conf: c, warn: warn.orNobody()}
}

// Close closes nothing: each read's process ends with it.
func (b *Relayed) Close() error { return nil }

// NodeKnown says whether Calico's etcd holds the Node called node.
func (b *Relayed) NodeKnown(ctx context.Context, node string) (bool, error) {
	resp, err := b.read(ctx, Request{Op: opNode, Node: node})
	return resp.Known, err
}

// Allocation reads what Calico records of ip; a zero Allocation when ip
// is not allocated.
func (b *Relayed) Allocation(ctx context.Context, ip netip.Addr) (guard.Allocation, error) {
	resp, err := b.read(ctx, Request{Op: opAllocation, IP: ip})
	return resp.Allocation, err
}

// HandleAllocations lists the addresses Calico keeps under handle.
func (b *Relayed) HandleAllocations(ctx context.Context, handle string) (map[netip.Addr]guard.Allocation, error) {
	resp, err := b.read(ctx, Request{Op: opHandle, Handle: handle})
	return resp.Held, err
}

// read runs one Request in the etcd build, bounded as the in-process
// reads are (connecting, then reading) and by ctx.
func (b *Relayed) read(ctx context.Context, req Request) (Response, error) {
	req.Calico = b.conf
	in, err := json.Marshal(req)
	if err != nil {
		return Response{}, fmt.Errorf("reading Calico's etcd: %w", err)
	}
	// A little more than the read's own bounds (ServeTimeout), so that its
	// error and warnings come back rather than a kill.
	ctx, cancel := context.WithTimeout(ctx, ServeTimeout+2*time.Second)
	defer cancel()
	out, err := builds.AskEtcdBuild(ctx, b.bin, in)
	if err != nil {
		return Response{}, err
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
// build run with builds.ReadEnv does.
func Serve(ctx context.Context, in io.Reader, out io.Writer, open func(config.CalicoSettings, Warn) Reader) error {
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
