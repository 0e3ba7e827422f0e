package scale

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// etcdCluster is Calico's etcd datastore, which also holds safe-ipam's
// records of every node (the etcd store): an embedded etcd, whose own
// counters say what it served.
type etcdCluster struct {
	o    Options
	etcd *etcdtest.Server
}

func newEtcdCluster(o Options) (*etcdCluster, error) {
	etcd, err := etcdtest.New(filepath.Join(o.Dir, "etcd"))
	if err != nil {
		return nil, err
	}
	return &etcdCluster{o: o, etcd: etcd}, nil
}

func (c *etcdCluster) describe() string {
	return "a real etcd (Calico's etcd datastore, safe-ipam's etcd store); what etcd served: its grpc_server_msg_received_total and etcd_network_client_grpc_sent_bytes_total"
}

func (c *etcdCluster) sweeps() bool { return true }

func (c *etcdCluster) target() string { return strings.TrimPrefix(c.etcd.Endpoint(), "http://") }

func (c *etcdCluster) served(context.Context) (Served, error) {
	return servedByEtcd(prometheus.DefaultGatherer)
}

func (c *etcdCluster) close() { c.etcd.Close() }

// conflist is Calico's config on node n, reaching etcd through its proxy.
func (c *etcdCluster) conflist(n *node) (string, error) {
	return `{"name":"` + Network + `","cniVersion":"1.0.0","plugins":[{"type":"calico","datastore_type":"etcdv3",` +
		`"etcd_endpoints":"` + n.proxy.endpoint() + `","nodename":"` + n.name + `","ipam":{"type":"calico-ipam"}}]}`, nil
}

// plant writes Calico's Nodes and every node's records, several writers
// at once, through the etcd store; it returns the size of the record keys
// of the nodes that are not simulated.
func (c *etcdCluster) plant(ctx context.Context) (int64, error) {
	cli := c.etcd.Client()
	if err := calicosim.SeedIPPool(ctx, cli, "default-ipv4-ippool", "10.0.0.0/8", c.o.BlockSize); err != nil {
		return 0, err
	}
	if err := inParallel(c.o.Nodes, func(i int) error { return c.plantNode(ctx, i) }); err != nil {
		return 0, err
	}
	var other int64
	for i := c.o.Simulated; i < c.o.Nodes; i++ {
		for p := range c.o.Pods {
			other += int64(len(etcdstore.RecordKey(config.DefaultEtcdPrefix, nodeName(i), attachment(i, p))))
		}
	}
	return other, nil
}

func (c *etcdCluster) plantNode(ctx context.Context, i int) error {
	name := nodeName(i)
	if err := calicosim.SeedNode(ctx, c.etcd.Client(), name); err != nil {
		return err
	}
	st := etcdstore.NewWithClient(c.etcd.Client(), config.DefaultEtcdPrefix, name, 30*time.Second)
	old := time.Now().Add(-time.Hour)
	for p := range c.o.Pods {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(p + 1)})
		rec := podRecord(i, p, netip.PrefixFrom(ip, c.o.BlockSize), old)
		if _, err := st.Commit(ctx, nil, rec); err != nil {
			return fmt.Errorf("record %s of %s: %w", rec.Attachment, name, err)
		}
	}
	return nil
}

// podRecord is the record of pod p of node i, which holds addr.
func podRecord(i, p int, addr netip.Prefix, at time.Time) *record.Record {
	return &record.Record{Attachment: attachment(i, p), Node: nodeName(i), Handle: Network + "." + containerID(i, p),
		PodNamespace: "default", PodName: containerID(i, p), State: record.Committed,
		IPs: []string{addr.String()}, Created: at, Updated: at}
}

// countClaims: the etcd store's address index spans the cluster, with
// no AddressClaims.
func (c *etcdCluster) countClaims(context.Context) (int, int64, error) { return 0, 0, nil }

// forget deletes the Calico Node of node i and times the release of its
// records.
func (c *etcdCluster) forget(ctx context.Context, i int, limit time.Duration) (time.Duration, error) {
	name := nodeName(i)
	if _, err := c.etcd.Client().Delete(ctx, calico.NodeKey(name)); err != nil {
		return 0, err
	}
	start := time.Now()
	st := etcdstore.NewWithClient(c.etcd.Client(), config.DefaultEtcdPrefix, "", 30*time.Second)
	err := waitFor(limit, func() bool {
		counts, err := st.RecordCounts(ctx, Network)
		return err == nil && counts[name] == 0
	})
	return time.Since(start), err
}

// inParallel runs do for 0..n-1, eight at a time; the first error wins.
func inParallel(n int, do func(i int) error) error { return concurrently(n, 8, do) }

// concurrently runs do for 0..n-1, workers at a time; the first error
// wins.
func concurrently(n, workers int, do func(i int) error) error {
	errs := make(chan error, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs <- do(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
