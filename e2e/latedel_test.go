package e2e

import (
	"slices"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/statefulset"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// lateDelCase is one run of the StatefulSet story.
type lateDelCase struct {
	name string
	tag  string
	opt  statefulset.Options
	// etcdStore puts safe-ipam's records in the cluster's etcd.
	etcdStore bool
}

// Scenario 1: one node, Calico 2.x handles. Container A of default/web-0
// is replaced by container B; A's DEL arrives late; a block's worth of
// other pods follows.
func TestStatefulSetLateDel(t *testing.T) { runLateDel(t, false, lateDelOneNode) }

// Scenario 1 with Calico's data in its Kubernetes datastore.
func TestKubeStatefulSetLateDel(t *testing.T) { runLateDel(t, true, lateDelOneNode) }

var lateDelOneNode = []lateDelCase{
	{name: "calico-ipam alone", tag: "s1c", opt: statefulset.Options{}},
	{name: "safe-ipam", tag: "s1s", opt: statefulset.Options{Safe: true}},
}

// Scenario 3: two nodes share Calico's etcd. web-0 moves from node1 to
// node2, A's DEL arrives late on node1, and node2's block cycles.
func TestStatefulSetMovedNodeLateDel(t *testing.T) { runLateDel(t, false, lateDelMoved) }

// Scenario 3 with Calico's data in its Kubernetes datastore: the nodes
// share the API server instead of etcd.
func TestKubeStatefulSetMovedNodeLateDel(t *testing.T) { runLateDel(t, true, lateDelMoved) }

var lateDelMoved = []lateDelCase{
	{name: "calico-ipam alone", tag: "s3c", opt: statefulset.Options{Move: true}},
	{name: "safe-ipam with a file store per node", tag: "s3f", opt: statefulset.Options{Move: true, Safe: true}},
	{name: "safe-ipam with the etcd store", tag: "s3e", opt: statefulset.Options{Move: true, Safe: true}, etcdStore: true},
}

func runLateDel(t *testing.T, kube bool, cases []lateDelCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			c := clusterOn(t, kube, tc.tag)
			dumpOnFailure(t, c)
			opt := tc.opt
			if tc.etcdStore {
				st := testbed.EtcdStore(c.EtcdEndpoint, "/safe-ipam/v1")
				opt.Store = &st
			}
			r, err := statefulset.Run(ctx, c, opt)
			if err != nil {
				t.Fatal(err)
			}
			logReport(t, r)
			if tc.opt.Safe {
				assertProtected(t, r)
			} else {
				assertControlFails(t, r)
			}
			if len(r.Leaks) > 0 {
				t.Errorf("after every DEL, still held: %v", r.Leaks)
			}
		})
	}
}

// assertControlFails checks that calico-ipam alone shows the incident:
// the late DEL frees the running pod's address, and Calico gives it to
// another pod while the running pod still holds it.
func assertControlFails(t *testing.T, r *statefulset.Report) {
	t.Helper()
	if !r.NewFreedByLateDel {
		t.Errorf("control: the late DEL of A left B's %s allocated; the failure did not reproduce", r.NewAddr)
	}
	if r.NewAddrHandle == "" || r.NewAddrHandle == statefulset.Pod.Namespace+"."+statefulset.Pod.Name {
		t.Errorf("control: B's %s is held by handle %q after the cycle, want another pod's handle", r.NewAddr, r.NewAddrHandle)
	}
	holders := r.Duplicates[r.NewAddr]
	if len(holders) < 2 || !slices.Contains(holders, r.New) {
		t.Errorf("control: B's %s is held by %v, want B and another pod (two netns, one address)", r.NewAddr, holders)
	}
}

// assertProtected checks safe-ipam's claim: the late DEL releases A's
// address only, and no address ends up in two netns.
func assertProtected(t *testing.T, r *statefulset.Report) {
	t.Helper()
	if r.NewFreedByLateDel {
		t.Errorf("the late DEL of A freed B's %s in Calico's data", r.NewAddr)
	}
	if !r.OldReleasedByLateDel {
		t.Errorf("the late DEL of A did not release A's %s", r.OldAddr)
	}
	if len(r.Duplicates) > 0 {
		t.Errorf("addresses held by more than one netns: %s", testbed.DescribeDuplicates(r.Duplicates))
	}
	if r.NewAddrHandle == "" {
		t.Errorf("B's %s is free in Calico's data while B runs", r.NewAddr)
	}
	if want := 1 + len(r.Others); r.Records != want {
		t.Errorf("safe-ipam's configured store holds %d records after the cycle, want %d (B and the other pods)", r.Records, want)
	}
}

func logReport(t *testing.T, r *statefulset.Report) {
	t.Helper()
	t.Logf("%s: A=%s B=%s; after late DEL: B freed=%v, A released=%v", r.Label, r.OldAddr, r.NewAddr, r.NewFreedByLateDel, r.OldReleasedByLateDel)
	for _, row := range r.Rows {
		var also []string
		for _, sb := range row.AlsoHeldBy {
			also = append(also, sb.Pod.String())
		}
		t.Logf("  %-14s %-22s %-15s handle=%-40q also=%v", row.Sandbox.Pod, row.Role, addrOrDash(row), row.CalicoHandle, also)
	}
	if len(r.Duplicates) > 0 {
		t.Logf("  duplicates: %s", testbed.DescribeDuplicates(r.Duplicates))
	}
}

func addrOrDash(row statefulset.Row) string {
	if !row.Addr.IsValid() {
		return "-"
	}
	return row.Addr.String()
}
