// Package etcdtest runs a real, single-member etcd server in-process for
// tests, on loopback with free ports and a throw-away data directory.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// Server is one embedded etcd member. It can be stopped and started again
// on the same ports and data, which is how tests simulate an outage.
type Server struct {
	dir        string
	clientURL  url.URL
	peerURL    url.URL
	etcd       *embed.Etcd
	clientConn *clientv3.Client
}

// Start starts a server for the test and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts a server whose data lives in dir. Close it when done.
func New(dir string) (*Server, error) {
	client, err := freeURL()
	if err != nil {
		return nil, err
	}
	peer, err := freeURL()
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, clientURL: client, peerURL: peer}
	if err := s.Resume(); err != nil {
		return nil, err
	}
	return s, nil
}

// Endpoint is the client URL, for example http://127.0.0.1:41234.
func (s *Server) Endpoint() string { return s.clientURL.String() }

// Client returns a client connected to the server, shared by the caller.
func (s *Server) Client() *clientv3.Client {
	if s.clientConn == nil {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint()}, DialTimeout: 5 * time.Second})
		if err != nil {
			panic(fmt.Sprintf("etcd client: %v", err)) // New does not dial; it fails only on bad config
		}
		s.clientConn = c
	}
	return s.clientConn
}

// Pause stops the server and keeps its data: clients see an outage.
func (s *Server) Pause() {
	if s.etcd != nil {
		s.etcd.Close()
		<-s.etcd.Server.StopNotify()
		s.etcd = nil
	}
}

// Resume starts the server again on the same ports and data.
func (s *Server) Resume() error {
	if s.etcd != nil {
		return nil
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = s.dir
	cfg.LogLevel = "fatal" // shutdown during outage tests logs errors that are expected
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting embedded etcd in %s: %w", s.dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("embedded etcd in %s not ready after 30s", s.dir)
	}
	s.etcd = e
	return nil
}

// Close stops the server and its shared client.
func (s *Server) Close() {
	if s.clientConn != nil {
		s.clientConn.Close()
		s.clientConn = nil
	}
	s.Pause()
}

// Dump returns every key and value under prefix, for test failure messages.
func (s *Server) Dump(prefix string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.Client().Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out, nil
}

func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}, nil
}
