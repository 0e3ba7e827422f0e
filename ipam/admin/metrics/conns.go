package metrics

import (
	"net"
	"net/http"
	"sync"
)

// MaxConns caps the connections the endpoint keeps: Prometheus and the
// kubelet's probes need a handful. Past it, the oldest connection that is
// not serving a request is closed, so that idle or silent connections
// (thousands, from any pod that reaches the address) cannot hold a
// goroutine and buffers each until the container's memory limit, while a
// new request still gets in.
const MaxConns = 64

// connLimit tracks the server's connections through http.Server's
// ConnState hook, oldest first.
type connLimit struct {
	max   int
	mu    sync.Mutex
	order []net.Conn // in the order they were accepted
	busy  map[net.Conn]bool
}

func newConnLimit(max int) *connLimit {
	return &connLimit{max: max, busy: map[net.Conn]bool{}}
}

// track is the ConnState hook.
func (l *connLimit) track(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateNew:
		l.order = append(l.order, c)
		l.busy[c] = false
		if len(l.order) > l.max {
			l.shed()
		}
	case http.StateActive:
		l.busy[c] = true
	case http.StateIdle:
		l.busy[c] = false
	case http.StateClosed, http.StateHijacked:
		l.forget(c)
	}
}

// shed closes the oldest connection that is not serving a request; the
// server then reports it closed.
func (l *connLimit) shed() {
	for _, c := range l.order {
		if !l.busy[c] {
			_ = c.Close()
			l.forget(c)
			return
		}
	}
}

func (l *connLimit) forget(c net.Conn) {
	if _, ok := l.busy[c]; !ok {
		return
	}
	delete(l.busy, c)
	for i, o := range l.order {
		if o == c {
			l.order = append(l.order[:i], l.order[i+1:]...)
			return
		}
	}
}
