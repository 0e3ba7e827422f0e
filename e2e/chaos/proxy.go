package chaos

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy stands between safe-ipam's etcd store and etcd. Blackhole makes
// it a one-way partition: requests still reach etcd and take effect, but
// no answer comes back, so the client cannot tell whether its write
// happened. Stopping etcd cannot do that: it answers what it accepted
// before it stops.
type Proxy struct {
	l        net.Listener
	upstream string

	mu    sync.Mutex
	conns map[net.Conn]bool
	holed bool
}

// NewProxy listens on a free loopback port and forwards to upstream
// (host:port).
func NewProxy(upstream string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, upstream: upstream, conns: map[net.Conn]bool{}}
	go p.serve()
	return p, nil
}

// Endpoint is the proxy's client URL.
func (p *Proxy) Endpoint() string { return "http://" + p.l.Addr().String() }

// Blackhole drops every answer from now on.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holed = true
}

// Heal ends the partition and cuts the connections it held, as a
// partition that heals leaves clients reconnecting.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holed = false
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy.
func (p *Proxy) Close() {
	p.l.Close()
	p.Heal()
}

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		client.Close()
		return
	}
	p.track(client, server)
	defer p.untrack(client, server)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { p.answer(client, server); done <- struct{}{} }()
	<-done
}

// answer copies etcd's answers to the client unless the proxy is holed.
func (p *Proxy) answer(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && !p.isHoled() {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				client.Close()
			}
			return
		}
	}
}

func (p *Proxy) isHoled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holed
}

func (p *Proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = true
	}
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}
