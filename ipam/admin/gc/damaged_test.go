package gc_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 31, item 7: a record that does not decode names no node. gc
// --dead-nodes skips it, and says so, instead of planning it under node
// "" ("node  is gone") or asking Calico for node "" (an error on the
// Kubernetes datastore, which failed every round); the gone node's
// records are released as before.
func TestDeadNodesSkipsADamagedRecord(t *testing.T) {
	w := newDeadNodesWorld(t)
	w.calicoNode(t, "node2")
	w.calicoNode(t, "node3")
	att := record.Attachment{Network: "k8s-pod-network", ContainerID: "c9", IfName: "eth0"}
	if _, err := w.etcd.Client().Put(context.Background(), etcdstore.RecordKey(config.DefaultEtcdPrefix, "node1", att), "{torn"); err != nil {
		t.Fatal(err)
	}
	conf := w.conf(t, `"etcd_endpoints":"`+w.etcd.Endpoint()+`"`)
	code, out := w.gc(t, conf)
	t.Logf("dry run:\n%s", out)
	if code != admin.ExitAttention || !strings.Contains(out, "1 to release, 2 kept") || !strings.Contains(out, "damaged") || strings.Contains(out, "node  is gone") {
		t.Fatalf("dry run: exit %d; want node1's record planned and the damaged one kept, saying so\n%s", code, out)
	}
	if code, out := w.gc(t, conf, "--apply"); code != admin.ExitOK {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	if got := calls(t, w.bin); !slices.Equal(got, []string{"DEL c1"}) {
		t.Errorf("delegate calls %v; want one DEL of node1's c1", got)
	}
}
