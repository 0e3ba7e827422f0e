package repair

import (
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// A re-claim needs positive evidence that the record's attachment runs
// and holds the address. The pods API names no containers, so its view
// says every attachment might run; from it, only the record's own pod
// (same UID) reporting the address proves it.
func TestReclaimNeedsProofTheRecordRuns(t *testing.T) {
	const addr = "10.244.0.5"
	rec := &record.Record{Attachment: record.Attachment{Network: "net", ContainerID: "c1", IfName: "eth0"},
		Node: "node1", Handle: "net.c1", PodNamespace: "default", PodName: "web-0", PodUID: "uid-b", State: record.Committed}
	pod := func(uid string, ips ...string) liveness.Running {
		return liveness.Running{PodNamespace: "default", PodName: "web-0", PodUID: uid, IPs: ips}
	}
	podsView := func(atts ...liveness.Running) *liveness.View {
		v := liveness.NewView("pods", "node1", atts)
		v.PodsOnly = true
		return v
	}
	for _, tc := range []struct {
		name  string
		live  *liveness.View
		uid   string
		allow bool
	}{
		{"pods: the record's pod reports the address", podsView(pod("uid-b", addr)), "uid-b", true},
		{"pods: the address given with its mask", podsView(pod("uid-b", addr+"/26")), "uid-b", true},
		{"pods: a recreated pod of the same name", podsView(pod("uid-c", addr)), "uid-b", false},
		{"pods: the pod has no address yet", podsView(pod("uid-b")), "uid-b", false},
		{"pods: the pod reports another address", podsView(pod("uid-b", "10.244.0.6")), "uid-b", false},
		{"pods: the record names no pod UID", podsView(pod("", addr)), "", false},
		{"pods: the pod is not listed", podsView(), "uid-b", false},
		{"file: lists the attachment", liveness.NewView("file", "node1", []liveness.Running{{ContainerID: "c1", IfName: "eth0"}}), "uid-b", true},
		{"file: lists another", liveness.NewView("file", "node1", []liveness.Running{{ContainerID: "c2", IfName: "eth0"}}), "uid-b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := *rec
			r.PodUID = tc.uid
			f := audit.Finding{Kind: audit.EarlyRelease, Address: addr, Records: []string{r.Attachment.String()}}
			act, why := planReclaim(f, map[string]*record.Record{r.Attachment.String(): &r}, tc.live)
			if (act != nil) != tc.allow {
				t.Errorf("re-claim planned: %v (refusal %q), want %v", act != nil, why, tc.allow)
			}
		})
	}
}
