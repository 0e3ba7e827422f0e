package guard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 20, finding 1: a holder fenced many times (a stale holder and a
// kubelet retrying every few seconds) has more quarantines than one etcd
// Txn may delete (128 operations by default). Its DEL still finishes,
// releasing each quarantine once, and leaves nothing behind.
func TestDELOfAHolderWithManyQuarantinesFinishes(t *testing.T) {
	const n = 150
	forEachStore(t, func(t *testing.T, r *rig) {
		ips, _ := resultIPs(r.add("holder"))
		ctx := context.Background()
		st := r.store()
		for i := range n {
			att := record.Attachment{Network: "net1", ContainerID: fmt.Sprintf("late%03d", i), IfName: "eth0"}
			pending, err := st.Swap(ctx, att, nil, &record.Record{Attachment: att, Node: r.node, State: record.Pending})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Quarantine(ctx, pending, r.record("holder"), record.Quarantine{Attachment: att, IPs: ips}); err != nil {
				t.Fatalf("quarantine %d: %v", i, err)
			}
		}
		before := len(r.calls("DEL"))
		if _, err := r.run("DEL", env("holder"), r.conf()); err != nil {
			t.Fatalf("DEL of a holder with %d quarantines: %v", n, err)
		}
		if got := len(r.calls("DEL")) - before; got != n+1 {
			t.Errorf("%d delegate DELs; want %d (the holder and each quarantine once)", got, n+1)
		}
		if rec := r.record("holder"); rec != nil {
			t.Fatalf("holder record left: %+v", rec)
		}
		r.add("late000") // no longer quarantined
		if r.kind == "etcd" {
			resp, err := sharedEtcd.get(t).Client().Get(ctx, etcdstore.QuarantinePrefix(r.prefix, ""), clientv3.WithPrefix())
			if err != nil || len(resp.Kvs) != 0 {
				t.Fatalf("quarantine keys left: %v, %v", keysOf(resp), err)
			}
		}
	})
}

// Issue 20, finding 1: a quarantine read from the store is input. One
// that is not what safe-ipam could have written (another network, a
// container ID that is not one, a key that names another attachment) is
// never released: its release would be a delegate DEL of any container.
func TestStoredQuarantinesAreValidatedBeforeRelease(t *testing.T) {
	r := newRig(t, "etcd")
	r.add("holder")
	cli := sharedEtcd.get(t).Client()
	holderKey := etcdstore.RecordKey(r.prefix, r.node, record.Attachment{Network: "net1", ContainerID: "holder", IfName: "eth0"})
	under := etcdstore.HolderPrefix(r.prefix, "net1", holderKey)
	entry := func(key, network, cid string) {
		q := record.Quarantine{Attachment: record.Attachment{Network: network, ContainerID: cid, IfName: "eth0"}, Node: r.node, IPs: []string{"10.0.0.9/26"}}
		data, _ := json.Marshal(q)
		if _, err := cli.Put(context.Background(), under+key, string(data)); err != nil {
			t.Fatal(err)
		}
	}
	entry("node1/ok/eth0", "net1", "ok")             // as Quarantine writes it
	entry("node1/decoy/eth0", "net1", "victim")      // the key names another attachment
	entry("node1/other/eth0", "net2", "other")       // another network
	entry("node1/bad/eth0", "net1", "../../bad;X=1") // not a container ID
	entry("node1/nonode/eth0", "net1", "nonode")     // rewritten below without a node
	if _, err := cli.Put(context.Background(), under+"node1/nonode/eth0", `{"network":"net1","containerID":"nonode","ifName":"eth0","ips":[]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.run("DEL", env("holder"), r.conf()); err != nil {
		t.Fatal(err)
	}
	var released []string
	for _, c := range r.calls("DEL") {
		released = append(released, c.ContainerID)
	}
	slices.Sort(released)
	if want := []string{"holder", "ok"}; !slices.Equal(released, want) {
		t.Fatalf("delegate DELs for %v; want %v", released, want)
	}
	resp, err := cli.Get(context.Background(), under, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("entries left under the released holder: %v, %v", keysOf(resp), err)
	}
}

// Issue 20, finding 1: a record read from the store is input too. GC
// releases what a listed record names; one whose content names another
// attachment than its key stands in as damaged, and only the attachment
// its key names is released.
func TestGCReleasesOnlyWhatARecordsKeyNames(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.cniVersion = "1.1.0"
		r.add("c1")
		rec := r.record("c1")
		rec.ContainerID = "victim"
		r.overwrite("c1", rec)
		if _, err := r.run("GC", env(""), gcConf(t, r.conf())); err != nil {
			t.Fatal(err)
		}
		for _, c := range r.calls("DEL") {
			if c.ContainerID != "c1" {
				t.Fatalf("GC released container %s; want only c1, which the record's key names", c.ContainerID)
			}
		}
		if len(r.records()) != 0 {
			t.Fatalf("records left: %+v", r.records())
		}
	})
}

// Issue 20, findings 1 and 8: a pod name read from a record never adds a
// pair to the CNI_ARGS of a delegate call. An adopted record's DEL passes
// its pod's identity to release its pod-name handle; a stored name with a
// ';' would name another pod.
func TestStoredPodNameNeverReachesCNIArgs(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		etcd := sharedEtcd.get(t)
		r.calicoEtcd = etcd.Endpoint()
		ctx := context.Background()
		pools := []calico.IPPool{calico.NewIPPool("pool", netip.MustParsePrefix("10.98.0.0/26"), 26)}
		handle := "default.web-" + r.prefix[1:] + ";K8S_POD_NAME=victim"
		asg, err := (&calicosim.Allocator{Client: etcd.Client(), Node: "node1"}).Assign(ctx, pools, handle, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.seedHandle(handle, asg.Prefix().String())
		att := record.Attachment{Network: "net1", ContainerID: "adopted", IfName: "eth0"}
		rec := &record.Record{Attachment: att, PodNamespace: "default", PodName: handle[len("default."):], Node: "node1", Handle: handle,
			State: record.Committed, IPs: []string{asg.Prefix().String()}, Created: time.Now(), Updated: time.Now()}
		r.add("adopted")
		r.overwrite("adopted", rec)
		r.del("adopted")
		for _, c := range r.calls("DEL") {
			if strings.Contains(c.Args, "K8S_POD_NAME=victim") {
				t.Fatalf("delegate DEL with CNI_ARGS %q", c.Args)
			}
		}
		if r.record("adopted") != nil {
			t.Fatal("the record stayed")
		}
	})
}

// What ADD records must read back as valid: pod fields CNI_ARGS could
// not carry are refused, naming the field, before anything is written.
func TestADDRefusesPodFieldsARecordCannotHold(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		e := env("c1")
		e.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web\x1b[2J"
		_, err := r.run("ADD", e, r.conf())
		if cniCode(err) != types.ErrInvalidEnvironmentVariables || !strings.Contains(err.Error(), "K8S_POD_NAME") {
			t.Fatalf("ADD = %v; want code 4 naming K8S_POD_NAME", err)
		}
		if len(r.calls("ADD")) != 0 || len(r.records()) != 0 {
			t.Fatalf("delegate ADDs %d, records %d; want none", len(r.calls("ADD")), len(r.records()))
		}
	})
}

// overwrite writes rec as the stored record of cid, bypassing every
// check, as whoever can write the store could.
func (r *rig) overwrite(cid string, rec *record.Record) {
	r.t.Helper()
	data, err := json.Marshal(rec)
	if err != nil {
		r.t.Fatal(err)
	}
	att := record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"}
	if r.kind == "etcd" {
		if _, err := sharedEtcd.get(r.t).Client().Put(context.Background(), etcdstore.RecordKey(r.prefix, r.node, att), string(data)); err != nil {
			r.t.Fatal(err)
		}
		return
	}
	// The file store wraps the record with its revision.
	path := filepath.Join(r.storeDir, "net1", cid+":eth0")
	var stored map[string]any
	raw, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(raw, &stored) != nil {
		r.t.Fatalf("reading %s: %v", path, err)
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		r.t.Fatal(err)
	}
	for k, v := range fields {
		stored[k] = v
	}
	out, _ := json.Marshal(stored)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		r.t.Fatal(err)
	}
}

func keysOf(resp *clientv3.GetResponse) []string {
	if resp == nil {
		return nil
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}
