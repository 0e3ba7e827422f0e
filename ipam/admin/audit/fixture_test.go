package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/repair"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

const recordsPrefix = "/safe-ipam/v1"

// world writes Calico's JSON and safe-ipam's records straight into a real
// etcd, the way the plugins leave them.
type world struct {
	t      *testing.T
	etcd   *etcdtest.Server
	blocks map[netip.Prefix]*calico.Block
}

func newWorld(t *testing.T) *world {
	return &world{t: t, etcd: etcdtest.Start(t), blocks: map[netip.Prefix]*calico.Block{}}
}

func (w *world) cli() *clientv3.Client { return w.etcd.Client() }

func (w *world) put(key string, v any) {
	w.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.cli().Put(context.Background(), key, string(data)); err != nil {
		w.t.Fatal(err)
	}
}

// block returns the node's block, creating and claiming it.
func (w *world) block(cidr, node string) *calico.Block {
	p := netip.MustParsePrefix(cidr)
	if b, ok := w.blocks[p]; ok {
		return b
	}
	b, err := calico.NewBlock(p, 1000)
	if err != nil {
		w.t.Fatal(err)
	}
	b.ClaimFor(node, time.Now())
	w.blocks[p] = b
	w.put(calico.AffinityKey(node, p), calico.ConfirmedAffinity())
	return b
}

// allocate gives the next address of the block to handle, as calico-ipam
// does, and keeps the handle document right.
func (w *world) allocate(cidr, node, handle string, secondary map[string]string) string {
	w.t.Helper()
	b := w.block(cidr, node)
	ords, err := b.Allocate(1, handle, secondary)
	if err != nil {
		w.t.Fatal(err)
	}
	w.put(calico.BlockKey(b.CIDR), b)
	h := w.handle(handle)
	h.Add(b.CIDR, 1)
	w.put(calico.HandleKey(handle), h)
	ip, _ := b.IP(ords[0])
	return ip.String()
}

// release frees the handle's addresses in the block, as a DEL does.
func (w *world) release(cidr, handle string) {
	w.t.Helper()
	b := w.blocks[netip.MustParsePrefix(cidr)]
	b.ReleaseHandle(handle)
	w.put(calico.BlockKey(b.CIDR), b)
	if _, err := w.cli().Delete(context.Background(), calico.HandleKey(handle)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) handle(id string) *calico.Handle {
	resp, err := w.cli().Get(context.Background(), calico.HandleKey(id))
	if err != nil {
		w.t.Fatal(err)
	}
	h := calico.NewHandle()
	if len(resp.Kvs) > 0 {
		_ = json.Unmarshal(resp.Kvs[0].Value, h)
	}
	return h
}

// record writes a committed safe-ipam record.
func (w *world) record(network, cid, node, ip string, pod string) *record.Record {
	w.t.Helper()
	rec := &record.Record{Attachment: record.Attachment{Network: network, ContainerID: cid, IfName: "eth0"},
		PodNamespace: "default", PodName: pod, Node: node, Handle: network + "." + cid, State: record.Committed,
		IPs: []string{ip + "/26"}, Created: time.Now(), Updated: time.Now()}
	s := etcdstore.NewWithClient(w.cli(), recordsPrefix, node, 5*time.Second)
	out, err := s.Swap(context.Background(), rec.Attachment, nil, rec)
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

func (w *world) liveFile(atts ...liveness.Running) string {
	w.t.Helper()
	return writeLiveFile(w.t, atts...)
}

// writeLiveFile writes a --live file listing atts (none: an empty list).
func writeLiveFile(t *testing.T, atts ...liveness.Running) string {
	t.Helper()
	if atts == nil {
		atts = []liveness.Running{}
	}
	path := filepath.Join(t.TempDir(), "live.json")
	data, _ := json.Marshal(atts)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs `safe-ipam audit|repair` with the world's endpoint.
func (w *world) run(fix bool, args ...string) (int, *repair.Report, string) {
	w.t.Helper()
	full := []string{"--etcd-endpoints", w.etcd.Endpoint(), "--json", "--node", "node1", "--cni-cache="}
	if fix && !contains(args, "--settle") {
		full = append(full, "--settle=0")
	}
	full = append(full, args...)
	var stdout, stderr bytes.Buffer
	code := runCmd(full, &stdout, &stderr, fix)
	var rep repair.Report
	if code != audit.ExitError {
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			w.t.Fatalf("report is not JSON: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
	}
	return code, &rep, stderr.String()
}

func (w *world) dump() map[string]string {
	w.t.Helper()
	m, err := w.etcd.Dump("/")
	if err != nil {
		w.t.Fatal(err)
	}
	return m
}

func kinds(fs []audit.Finding) map[audit.Kind]int {
	m := map[audit.Kind]int{}
	for _, f := range fs {
		m[f.Kind]++
	}
	return m
}

func find(fs []audit.Finding, k audit.Kind) *audit.Finding {
	for i := range fs {
		if fs[i].Kind == k {
			return &fs[i]
		}
	}
	return nil
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// runCmd runs `safe-ipam repair` when fix is set, else `safe-ipam audit`.
func runCmd(args []string, stdout, stderr io.Writer, fix bool) int {
	if fix {
		return repair.Run(args, stdout, stderr)
	}
	return audit.Run(args, stdout, stderr)
}
