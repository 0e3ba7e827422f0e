package containerd

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"

	"github.com/containernetworking/plugins/pkg/ns"
)

// EtcdProxy makes the test's etcd reachable at the same address from
// inside the holder's network namespace, where calico-ipam and safe-ipam
// run: it listens there and forwards to the host's endpoint.
type EtcdProxy struct {
	ln    net.Listener
	addr  string
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

// StartEtcdProxy listens on endpoint's host:port inside netnsPath.
func StartEtcdProxy(netnsPath, endpoint string) (*EtcdProxy, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("etcd endpoint %s: %w", endpoint, err)
	}
	target, err := ns.GetNS(netnsPath)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", netnsPath, err)
	}
	defer target.Close()
	p := &EtcdProxy{addr: u.Host}
	// A socket belongs to the namespace it was made in.
	if err := target.Do(func(ns.NetNS) error {
		p.ln, err = net.Listen("tcp", u.Host)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listening on %s in %s: %w", u.Host, netnsPath, err)
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// StartLocalEtcdProxy listens on a free port of 127.0.0.1 in this
// network namespace and forwards to endpoint: another endpoint of the
// same etcd, which Close takes away (an etcd moved, its old address
// gone).
func StartLocalEtcdProxy(endpoint string) (*EtcdProxy, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("etcd endpoint %s: %w", endpoint, err)
	}
	p := &EtcdProxy{addr: u.Host}
	if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Endpoint is where the proxy listens, as an etcd endpoint.
func (p *EtcdProxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *EtcdProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.addr)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go pipe(in, out)
		go pipe(out, in)
	}
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Close stops listening and closes every forwarded connection.
func (p *EtcdProxy) Close() {
	p.ln.Close()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
