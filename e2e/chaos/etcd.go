package chaos

import (
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
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcdServer is one embedded etcd member that can stop and start again on
// the same ports and data: an outage. It is etcdtest.Server made fit for
// hundreds of outages a run, with clusters side by side:
//   - its ports lie below the kernel's ephemeral range. While a server is
//     stopped, nothing else may take its port, and outgoing connections
//     (plugins retrying, another cluster's clients) draw their source
//     ports from that range; etcdtest's ports come from it, and a run of
//     `make chaos` would now and then find its port taken on restart;
//   - it starts in milliseconds (short raft ticks, no fsync: it lives in
//     tmpfs and a crash of the test loses nothing that matters), so an
//     outage costs what the calls during it cost;
//   - it serves no gRPC gateway, whose connection to itself would be one
//     more long-lived source port.
type etcdServer struct {
	dir          string
	client, peer url.URL
	e            *embed.Etcd
}

func newEtcdServer(dir string) (*etcdServer, error) {
	ports, err := freeFixedPorts(2)
	if err != nil {
		return nil, err
	}
	s := &etcdServer{dir: dir,
		client: url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ports[0])},
		peer:   url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ports[1])}}
	if err := s.Resume(); err != nil {
		return nil, err
	}
	return s, nil
}

// Endpoint is the client URL.
func (s *etcdServer) Endpoint() string { return s.client.String() }

// Pause stops the server and keeps its data.
func (s *etcdServer) Pause() {
	if s.e != nil {
		s.e.Close()
		<-s.e.Server.StopNotify()
		s.e = nil
	}
}

// Resume starts the server again on the same ports and data. A port held
// for a moment by someone else's explicit bind is waited for.
func (s *etcdServer) Resume() error {
	if s.e != nil {
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

func (s *etcdServer) start() error {
	// etcd exits the whole process when its WAL is locked, and a plugin
	// forked (not yet exec'd) while the last server ran still shares the
	// lock for a moment.
	if err := waitWALUnlocked(filepath.Join(s.dir, "member", "wal")); err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = "chaos"
	cfg.Dir = s.dir
	cfg.LogLevel = "fatal" // stopping amid requests logs errors that are the point
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = true
	cfg.EnableGRPCGateway = false
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{s.client}, []url.URL{s.client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{s.peer}, []url.URL{s.peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd in %s: %w", s.dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		s.e = e
		return nil
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("etcd in %s not ready after 30s", s.dir)
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

// Close stops the server.
func (s *etcdServer) Close() { s.Pause() }

// freeFixedPorts picks n free loopback ports between 20000 and the start
// of the ephemeral range, where only an explicit bind can take them.
func freeFixedPorts(n int) ([]int, error) {
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
