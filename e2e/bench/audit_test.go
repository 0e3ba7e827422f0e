package bench

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
)

// The audit is measured on records as the plugin commits them: the pod,
// the host and the delegate's result, whose address is the record's and
// Calico's under the record's handle. Without them a record was half its
// size, and the audit's time and memory were measured on the lighter half.
func TestSeedAuditPlantsWhatThePluginCommits(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx := context.Background()
	if err := SeedAudit(ctx, etcd.Client(), 3); err != nil {
		t.Fatal(err)
	}
	recs, _, err := etcdstore.ListAt(ctx, etcd.Client(), "/safe-ipam/v1", auditNetwork, 0, nil)
	if err != nil || len(recs) != 3 {
		t.Fatalf("records: %d, %v; want 3", len(recs), err)
	}
	resp, err := etcd.Client().Get(ctx, calico.BlockKey(netip.MustParsePrefix("10.128.0.0/26")))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the block: %v", err)
	}
	var b calico.Block
	if err := json.Unmarshal(resp.Kvs[0].Value, &b); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.PodNamespace == "" || rec.PodName == "" || rec.PodUID == "" || rec.Host == "" {
			t.Errorf("%s names no pod or host: %+v", rec.Attachment, rec)
		}
		var res types100.Result
		if err := json.Unmarshal(rec.Result, &res); err != nil || len(res.IPs) != 1 {
			t.Fatalf("%s: result %q: %v", rec.Attachment, rec.Result, err)
		}
		addr, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
		ones, _ := res.IPs[0].Address.Mask.Size()
		if got := netip.PrefixFrom(addr, ones).String(); got != rec.IPs[0] {
			t.Errorf("%s: result gives %s; the record %s", rec.Attachment, got, rec.IPs[0])
		}
		if a, taken, err := b.AttributeOf(addr); err != nil || !taken || a.Handle() != rec.Handle {
			t.Errorf("%s: Calico holds %s under %q; the record's handle is %q", rec.Attachment, addr, a.Handle(), rec.Handle)
		}
	}
}
