package guard_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 41, item 2.4: a node renamed (or its stale nodename fixed) while
// its pod ran keeps the pod's record under the old name, where its DEL,
// under the new name, did not look: the DEL freed the address in Calico
// and the record fenced it for ever. The DEL now finds the record through
// the address index from its prevResult and releases it: the runtime's
// DEL of that very container is the evidence, whichever host wrote the
// record (a container ID is one runtime's), one without a host (an older
// safe-ipam's) included. Without a prevResult nothing is read (gc
// --former-node remains). Kept, the index entry would fence the address
// the DEL freed.
func TestDelAfterARenameReleasesTheOldNamesRecord(t *testing.T) {
	tests := []struct {
		name      string
		host      string // the record's host ("none" for none); "" keeps this machine's
		prev      bool
		forgotten bool
	}{
		{name: "this machine's record", prev: true, forgotten: true},
		{name: "written under another host name", host: "before-a-host-rename", prev: true, forgotten: true},
		{name: "no host (an older safe-ipam's)", host: "none", prev: true, forgotten: true},
		{name: "no prevResult"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "etcd")
			old := "old" + r.prefix[1:]
			r.node = old
			res := r.add("c1")
			if tt.host != "" {
				rec := r.record("c1")
				rec.Host = strings.TrimPrefix(tt.host, "none")
				r.overwrite("c1", rec)
			}
			r.node = "new" + r.prefix[1:]
			stdin := r.conf()
			if tt.prev {
				stdin = withPrevResult(t, stdin, res)
			}
			if _, err := r.run("DEL", env("c1"), stdin); err != nil {
				t.Fatalf("DEL under the new name: %v", err)
			}
			r.node = old
			if left := r.record("c1") == nil; left != tt.forgotten {
				t.Fatalf("record under the old name forgotten = %v; want %v: %+v", left, tt.forgotten, r.record("c1"))
			}
			ips, _ := resultIPs(res)
			holder, err := r.store().(store.Cluster).Holder(context.Background(), "net1", ips[0])
			if err != nil || (holder == nil) != tt.forgotten {
				t.Fatalf("the address's index entry names %+v (%v); want it gone with the record: %v", holder, err, tt.forgotten)
			}
		})
	}
}

// The same for a record adopted under its pod's name (a pod from before
// safe-ipam): the runtime's DEL of that container frees the pod-name
// handle, as the DEL under the node's own name does, and as Calico alone
// would. Released as a dead node's, it was left to kube-controllers, which
// never frees a live node's: a leak (review of issue 41).
func TestDelAfterARenameReleasesAnAdoptedPodHandle(t *testing.T) {
	r := newRig(t, "etcd")
	etcd := sharedEtcd.get(t)
	r.calicoEtcd = etcd.Endpoint()
	ctx := context.Background()
	old := "old" + r.prefix[1:]
	r.node = old
	pools := []calico.IPPool{calico.NewIPPool("pool", netip.MustParsePrefix("10.97.0.0/26"), 26)}
	handle := "default.web-" + r.prefix[1:]
	asg, err := (&calicosim.Allocator{Client: etcd.Client(), Node: old}).Assign(ctx, pools, handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.seedHandle(handle, asg.Prefix().String())
	att := record.Attachment{Network: "net1", ContainerID: "adopted", IfName: "eth0"}
	rec := &record.Record{Attachment: att, PodNamespace: "default", PodName: handle[len("default."):], Node: old, Host: record.ThisHost(), Handle: handle,
		State: record.Committed, IPs: []string{asg.Prefix().String()}, Created: time.Now(), Updated: time.Now()}
	if _, err := r.store().Commit(ctx, nil, rec); err != nil {
		t.Fatal(err)
	}
	r.node = "new" + r.prefix[1:]
	ip := asg.Prefix()
	prev := &types100.Result{CNIVersion: "1.0.0", IPs: []*types100.IPConfig{{Address: net.IPNet{IP: ip.Addr().AsSlice(), Mask: net.CIDRMask(ip.Bits(), 32)}}}}
	if _, err := r.run("DEL", env("adopted"), withPrevResult(t, r.conf(), prev)); err != nil {
		t.Fatal(err)
	}
	r.node = old
	if _, held := r.held()[handle]; held || r.record("adopted") != nil {
		t.Fatalf("after the DEL under the new name: pod-name handle %s held %v, record %+v; want both gone", handle, held, r.record("adopted"))
	}
}
