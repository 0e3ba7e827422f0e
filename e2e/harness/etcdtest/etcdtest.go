// Package etcdtest runs a real, single-member etcd server in-process for
// tests, on loopback ports and a throw-away data directory. It can stop
// and start again on the same ports and data, which is how tests make an
// outage.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Options tune a server.
type Options struct {
	// Fast trades durability for speed: no fsync and short raft ticks,
	// for suites that stop and start etcd hundreds of times. Data written
	// survives Pause and Resume, not a machine crash.
	Fast bool
	// TLS serves clients over https and requires a client certificate
	// signed by the server's CA, as Calico's etcd clusters do. The files
	// are generated in the data directory's tls/ and named by Server.TLS.
	TLS bool
	// GRPC are options of the server's gRPC service: a stats handler
	// counts what this server alone served, where etcd's own counters
	// are the process's, shared by every etcd it embeds.
	GRPC []grpc.ServerOption
	// QuotaBytes is the backend's size limit (0: etcd's default, 2 GiB):
	// a store of hundreds of thousands of pods is larger.
	QuotaBytes int64
}

// Server is one embedded etcd member.
type Server struct {
	dir        string
	opts       Options
	clientURL  url.URL
	peerURL    url.URL
	etcd       *embed.Etcd
	clientConn *clientv3.Client
	// TLS names the certificate files when the server runs with
	// Options.TLS, else it is nil.
	TLS *TLSFiles
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
func New(dir string) (*Server, error) { return NewWith(dir, Options{}) }

// NewWith starts a server with options. A port picked free can be taken
// by another test's server before this one binds it: it picks again.
func NewWith(dir string, opts Options) (*Server, error) {
	for attempt := 1; ; attempt++ {
		s, err := newWith(dir, opts)
		if err == nil || attempt == 5 || !errors.Is(err, syscall.EADDRINUSE) && !strings.Contains(err.Error(), "address already in use") {
			return s, err
		}
	}
}

func newWith(dir string, opts Options) (*Server, error) {
	ports, err := fixedPorts(2)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, opts: opts,
		clientURL: url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ports[0])},
		peerURL:   url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ports[1])}}
	if opts.TLS {
		s.clientURL.Scheme = "https"
		if s.TLS, err = writeTLSFiles(filepath.Join(dir, "tls")); err != nil {
			return nil, fmt.Errorf("etcd TLS material: %w", err)
		}
	}
	if err := s.Resume(); err != nil {
		return nil, err
	}
	return s, nil
}

// StartTLS starts a server that requires client certificates, for the
// test, and stops it when the test ends.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	s, err := NewWith(t.TempDir(), Options{TLS: true})
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Endpoint is the client URL, for example http://127.0.0.1:21234, or
// https:// in TLS mode.
func (s *Server) Endpoint() string { return s.clientURL.String() }

// Client returns a client connected to the server, shared by the caller.
// In TLS mode it presents the good client certificate.
func (s *Server) Client() *clientv3.Client {
	if s.clientConn == nil {
		cfg := clientv3.Config{Endpoints: []string{s.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
		if s.TLS != nil {
			var err error
			if cfg.TLS, err = s.TLS.clientConfig(); err != nil {
				panic(fmt.Sprintf("etcd client TLS: %v", err)) // the files were written by NewWith
			}
		}
		c, err := clientv3.New(cfg)
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

// Resume starts the server again on the same ports and data. A port held
// for a moment by someone else's explicit bind is waited for.
func (s *Server) Resume() error {
	if s.etcd != nil {
		return nil
	}
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func (s *Server) start() error {
	// etcd exits the whole process when its WAL is locked, and a child
	// forked (not yet exec'd) while the last server ran still shares the
	// lock for a moment.
	if err := waitWALUnlocked(filepath.Join(s.dir, "member", "wal")); err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = s.dir
	cfg.LogLevel = "fatal" // stopping amid requests logs errors that outage tests expect
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{s.clientURL}, []url.URL{s.clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{s.peerURL}, []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if s.TLS != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: s.TLS.serverCertFile, KeyFile: s.TLS.serverKeyFile,
			TrustedCAFile: s.TLS.CAFile, ClientCertAuth: true}
	}
	cfg.GRPCAdditionalServerOptions = s.opts.GRPC
	cfg.QuotaBackendBytes = s.opts.QuotaBytes
	if s.opts.Fast {
		cfg.TickMs, cfg.ElectionMs = 10, 100
		cfg.UnsafeNoFsync = true
		cfg.EnableGRPCGateway = false
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting embedded etcd in %s: %w", s.dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		s.etcd = e
		return nil
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("embedded etcd in %s not ready after 30s", s.dir)
	}
}

// waitWALUnlocked waits until etcd can lock every WAL file in dir, as it
// will on start.
func waitWALUnlocked(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, f := range files {
		for {
			l, err := fileutil.TryLockFile(f, os.O_WRONLY, fileutil.PrivateFileMode)
			if err == nil {
				l.Close()
				break
			}
			if !errors.Is(err, fileutil.ErrLocked) || time.Now().After(deadline) {
				return fmt.Errorf("etcd WAL %s: %w", f, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
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

// Dump returns every key and value under prefix: what a test compares, or
// prints when it fails.
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

// fixedPorts picks n free loopback ports between 20000 and the start of
// the kernel's ephemeral range. Outgoing connections draw their source
// ports from that range, so a port below it stays free while the server
// is paused; only an explicit bind can take it.
func fixedPorts(n int) ([]int, error) {
	low, high := 20000, ephemeralLow()
	if high-low < 1000 {
		return nil, fmt.Errorf("the ephemeral port range starts at %d: no room below it for etcd", high)
	}
	var ports []int
	for tries := 0; len(ports) < n && tries < 1000; tries++ {
		p := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("no free port between %d and %d", low, high)
	}
	return ports, nil
}

// ephemeralLow is where the kernel starts drawing source ports.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return low
}
