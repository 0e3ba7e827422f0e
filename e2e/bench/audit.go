package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// AuditCost is the audit of a large store, run as the operator runs it.
type AuditCost struct {
	Allocations int     `json:"allocations"`
	Records     int     `json:"records"`
	Seconds     float64 `json:"seconds"`
	PeakRSSKiB  int64   `json:"peakRSSKiB"`
	Findings    int     `json:"findings"`
}

const auditNetwork = "k8s-pod-network"

// measureAudit writes n allocations in Calico's layout with a committed
// record each, then times `safe-ipam audit --json` and reads its peak RSS.
func (r *rig) measureAudit(ctx context.Context, res *Results) error {
	n := r.opts.AuditAllocs
	if n == 0 {
		return nil
	}
	var err error
	res.Audit, err = MeasureAudit(ctx, r.etcd.Client(), r.etcd.Endpoint(), r.binDir, r.dir, n)
	return err
}

// MeasureAudit plants n allocations with a record each in the etcd at
// endpoint (cli), then runs the admin binary's `audit --json` in binDir
// as a process under peakrss (also in binDir), with its files in dir.
func MeasureAudit(ctx context.Context, cli *clientv3.Client, endpoint, binDir, dir string, n int) (*AuditCost, error) {
	if err := SeedAudit(ctx, cli, n); err != nil {
		return nil, fmt.Errorf("seeding %d allocations: %w", n, err)
	}
	rssFile := filepath.Join(dir, "peakrss")
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "peakrss"), "-o", rssFile, filepath.Join(binDir, "safe-ipam"),
		"audit", "--json", "--etcd-endpoints", endpoint, "--cni-cache=", "--network", auditNetwork)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start)
	if err != nil && cmd.ProcessState.ExitCode() != 1 {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var rep struct {
		Summary struct {
			Allocations int `json:"allocations"`
			Records     int `json:"records"`
		} `json:"summary"`
		Findings []json.RawMessage `json:"findings"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("audit output: %w", err)
	}
	if rep.Summary.Allocations < n {
		return nil, fmt.Errorf("audit saw %d allocations, seeded %d", rep.Summary.Allocations, n)
	}
	rss, err := ReadPeakRSS(rssFile)
	if err != nil {
		return nil, err
	}
	return &AuditCost{Allocations: rep.Summary.Allocations, Records: rep.Summary.Records, Seconds: elapsed.Seconds(), Findings: len(rep.Findings), PeakRSSKiB: rss}, nil
}

// SeedAudit writes blocks of a 10.128.0.0/10 pool full of pods, with
// their handles and records, in transactions of up to 120 operations.
func SeedAudit(ctx context.Context, cli *clientv3.Client, n int) error {
	w := &batchWriter{ctx: ctx, cli: cli}
	base := netip.MustParseAddr("10.128.0.0")
	now := time.Now().UTC()
	for start := 0; start < n; start += 64 {
		cidr := netip.PrefixFrom(AddOffset(base, start), 26)
		b, err := calico.NewBlock(cidr, uint64(now.UnixNano()))
		if err != nil {
			return err
		}
		b.ClaimFor("node1", now)
		for i := start; i < start+64 && i < n; i++ {
			cid := fmt.Sprintf("%064x", i)
			handle := auditNetwork + "." + cid
			ords, err := b.Allocate(1, handle, map[string]string{"namespace": "bench", "pod": fmt.Sprintf("pod-%d", i), "node": "node1", "timestamp": now.String()})
			if err != nil {
				return err
			}
			ip, _ := b.IP(ords[0])
			h := calico.NewHandle()
			h.Add(cidr, 1)
			result, err := calicoResult(ip, cidr)
			if err != nil {
				return err
			}
			// As the plugin commits a pod's record: its pod, host and
			// the delegate's result (most of a record's bytes).
			rec := record.Record{Attachment: record.Attachment{Network: auditNetwork, ContainerID: cid, IfName: "eth0"}, Node: "node1",
				PodNamespace: "bench", PodName: fmt.Sprintf("pod-%d", i), PodUID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i), Host: "node1",
				Handle: handle, State: record.Committed, IPs: []string{netip.PrefixFrom(ip, 26).String()}, Result: result, Created: now, Updated: now}
			w.put(calico.HandleKey(handle), h)
			w.put(etcdstore.RecordKey("/safe-ipam/v1", "node1", rec.Attachment), rec)
		}
		w.put(calico.BlockKey(cidr), b)
		w.put(calico.AffinityKey("node1", cidr), calico.ConfirmedAffinity())
		if w.err != nil {
			return w.err
		}
	}
	w.flush()
	return w.err
}

// calicoResult is the result calico-ipam gives for ip in block: the
// address with the block's mask and a route to the block.
func calicoResult(ip netip.Addr, block netip.Prefix) ([]byte, error) {
	mask := net.CIDRMask(block.Bits(), 32)
	return json.Marshal(&types100.Result{CNIVersion: types100.ImplementedSpecVersion,
		IPs:    []*types100.IPConfig{{Address: net.IPNet{IP: ip.AsSlice(), Mask: mask}}},
		Routes: []*types.Route{{Dst: net.IPNet{IP: block.Addr().AsSlice(), Mask: mask}}}})
}

// AddOffset is the IPv4 address off addresses after a.
func AddOffset(a netip.Addr, off int) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(off)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

type batchWriter struct {
	ctx context.Context
	cli *clientv3.Client
	ops []clientv3.Op
	err error
}

func (w *batchWriter) put(key string, v any) {
	if w.err != nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		w.err = err
		return
	}
	w.ops = append(w.ops, clientv3.OpPut(key, string(data)))
	if len(w.ops) >= 120 {
		w.flush()
	}
}

func (w *batchWriter) flush() {
	if w.err != nil || len(w.ops) == 0 {
		return
	}
	_, w.err = w.cli.Txn(w.ctx).Then(w.ops...).Commit()
	w.ops = w.ops[:0]
}

// machine describes where the figures come from.
func machine() string {
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(data), "\n", 2)[0], "MemTotal:")), "%d", &kb)
		mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
	}
	return fmt.Sprintf("%d cores%s, %s, %s", runtime.NumCPU(), mem, cpu, runtime.Version())
}
