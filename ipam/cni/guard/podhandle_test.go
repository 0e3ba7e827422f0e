package guard_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// An adopted record whose addresses live under a namespace.podname handle
// (a pod that ran before safe-ipam): DEL releases that handle only when
// Calico's data, read at DEL time, shows it holds nothing but the record's
// addresses; otherwise the handle stays, for the audit to report.
func TestDelReleasesAnAdoptedPodHandleOnlyWhenProvenOwn(t *testing.T) {
	tests := []struct {
		name     string
		others   int // other addresses the pod-name handle holds in Calico
		released bool
	}{
		{"the handle holds only the record's address", 0, true},
		{"another container of the pod name holds one too", 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, r *rig) {
				etcd := sharedEtcd.get(t)
				r.calicoEtcd = etcd.Endpoint()
				ctx := context.Background()
				cidr := netip.MustParsePrefix("10.99.0.0/26")
				pools := []calico.IPPool{calico.NewIPPool("pool", cidr, 26)}
				alloc := &calicosim.Allocator{Client: etcd.Client(), Node: "node1"}
				handle := "default.web-" + r.prefix[1:] // one handle per rig on the shared etcd
				asg, err := alloc.Assign(ctx, pools, handle, nil)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < tt.others; i++ {
					if _, err := alloc.Assign(ctx, pools, handle, nil); err != nil {
						t.Fatal(err)
					}
				}
				r.seedHandle(handle, asg.Prefix().String())
				att := record.Attachment{Network: "net1", ContainerID: "adopted", IfName: "eth0"}
				rec := &record.Record{Attachment: att, PodNamespace: "default", PodName: handle[len("default."):], Node: "node1", Handle: handle,
					State: record.Committed, IPs: []string{asg.Prefix().String()}, Created: time.Now(), Updated: time.Now()}
				if _, err := r.store().Commit(ctx, nil, rec); err != nil {
					t.Fatal(err)
				}
				r.del("adopted")
				if _, held := r.held()[handle]; held == tt.released {
					t.Fatalf("pod-name handle %s held after DEL: %v; want released %v", handle, held, tt.released)
				}
				if r.record("adopted") != nil {
					t.Fatal("the record stayed")
				}
			})
		})
	}
}
