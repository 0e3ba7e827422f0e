package scale

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/stats"
)

// Served is what the datastore served, by its own counters. etcd: the
// gRPC messages it received from clients (a unary request is one; each
// lease keepalive or watch request on a stream is one too) and the bytes
// it sent them. The API server: its requests and response bytes.
type Served struct {
	Requests float64
	Bytes    float64
}

// Sub is s less t.
func (s Served) Sub(t Served) Served { return Served{s.Requests - t.Requests, s.Bytes - t.Bytes} }

// Add is s and t together.
func (s Served) Add(t Served) Served { return Served{s.Requests + t.Requests, s.Bytes + t.Bytes} }

// Div is s divided by n.
func (s Served) Div(n float64) Served { return Served{s.Requests / n, s.Bytes / n} }

// servedByEtcd reads the counters of the etcd embedded in this process
// (etcdtest), as its /metrics endpoint serves them.
func servedByEtcd(g prometheus.Gatherer) (Served, error) {
	mfs, err := g.Gather()
	if err != nil {
		return Served{}, fmt.Errorf("etcd's metrics: %w", err)
	}
	var s Served
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "grpc_server_msg_received_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "grpc_service" && strings.HasPrefix(l.GetValue(), "etcdserverpb.") {
						s.Requests += m.GetCounter().GetValue()
					}
				}
			case "etcd_network_client_grpc_sent_bytes_total":
				s.Bytes += m.GetCounter().GetValue()
			}
		}
	}
	return s, nil
}

// grpcServed counts what one gRPC service served, as a stats handler of
// its server: the messages it received (a unary request is one; each
// message on a stream is one, as grpc_server_msg_received_total counts
// them) and the bytes of the messages it sent (as
// etcd_network_client_grpc_sent_bytes_total counts them). Those two are
// the process's, shared by every etcd it embeds; this is one server's.
type grpcServed struct {
	received, sent atomic.Int64
}

func (g *grpcServed) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (g *grpcServed) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.InPayload:
		g.received.Add(1)
	case *stats.OutPayload:
		g.sent.Add(int64(s.Length))
	}
}

func (g *grpcServed) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (g *grpcServed) HandleConn(context.Context, stats.ConnStats) {}

func (g *grpcServed) served() Served {
	return Served{Requests: float64(g.received.Load()), Bytes: float64(g.sent.Load())}
}

// proxy forwards one node's connections to the datastore and counts the
// bytes it sent that node: whoever lists other nodes' records receives at
// least their keys.
type proxy struct {
	ln       net.Listener
	target   string
	received atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

func startProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target}
	go p.serve()
	return p, nil
}

func (p *proxy) endpoint() string { return "http://" + p.addr() }

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(in)
	}
}

// forward joins one connection of the node to etcd, counting what etcd
// sends back.
func (p *proxy) forward(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, in, out)
	p.mu.Unlock()
	go p.pipe(out, in, nil)
	p.pipe(in, out, &p.received)
}

func (p *proxy) pipe(dst, src net.Conn, count *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if count != nil {
				count.Add(int64(n))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
