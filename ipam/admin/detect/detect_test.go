package detect_test

import (
	"context"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	admindetect "github.com/safe-ipam/safe-ipam/ipam/admin/detect"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// Issue 47: against a real kube-apiserver, every pod is read page by
// page (a page of one here), and the check finds two running pods on two
// nodes with one address and a pod whose Calico annotation names another
// address than its status; the metrics say so by kind, and a kind the
// round could not judge stays unknown. An identity that may not list pods
// fails the read: never "no pods".
func TestReadPodsAndObserve(t *testing.T) {
	srv := kubetest.Start(t)
	ctx := context.Background()
	for _, p := range []struct{ name, node, ip string }{{"a", "n1", "10.0.0.1"}, {"b", "n2", "10.0.0.1"}, {"c", "n1", "10.0.0.3"}, {"d", "n2", "10.0.0.4"}} {
		if _, err := srv.RunPod("default", p.name, p.node, p.ip); err != nil {
			t.Fatal(err)
		}
	}
	c, err := srv.Client().CoreV1().Pods("default").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Annotations = map[string]string{detect.AnnotationPodIP: "10.0.0.9/32"}
	if _, err := srv.Client().CoreV1().Pods("default").Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := admindetect.ReadPods(ctx, srv.Client(), 1)
	if err != nil || len(pods) != 4 {
		t.Fatalf("read %d pods (%v), want 4", len(pods), err)
	}
	r := detect.Check(detect.Evidence{Pods: pods, PodsComplete: true}, detect.NewGone())
	reg := prometheus.NewRegistry()
	m := admindetect.NewMetrics(reg)
	m.Observe(r)
	want := `
# HELP safe_ipam_detect_findings Findings of the last round of the continuous check that judged the kind, by kind (shared-address, annotation-mismatch, early-release, gone-owner).
# TYPE safe_ipam_detect_findings gauge
safe_ipam_detect_findings{kind="annotation-mismatch"} 1
safe_ipam_detect_findings{kind="early-release"} 0
safe_ipam_detect_findings{kind="gone-owner"} 0
safe_ipam_detect_findings{kind="shared-address"} 1
# HELP safe_ipam_detect_unknown 1 for a kind the last round could not judge (a listing it could not read whole), else 0.
# TYPE safe_ipam_detect_unknown gauge
safe_ipam_detect_unknown{kind="annotation-mismatch"} 0
safe_ipam_detect_unknown{kind="early-release"} 1
safe_ipam_detect_unknown{kind="gone-owner"} 1
safe_ipam_detect_unknown{kind="shared-address"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "safe_ipam_detect_findings", "safe_ipam_detect_unknown"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.Rounds.WithLabelValues("unknown")); got != 1 {
		t.Errorf("rounds with an unknown kind: %v, want 1", got)
	}
	// On Calico's etcd datastore two kinds do not apply: no series, and
	// the round is ok once the rest are known.
	m.Observe(detect.Report{Unknown: map[detect.Kind]string{detect.AnnotationMismatch: "etcd", detect.EarlyRelease: "etcd"},
		NotApplicable: []detect.Kind{detect.AnnotationMismatch, detect.EarlyRelease}})
	if n := testutil.CollectAndCount(m.Findings); n != 2 {
		t.Errorf("%d findings series on etcd, want 2 (shared-address, gone-owner)", n)
	}
	if got := testutil.ToFloat64(m.Rounds.WithLabelValues("ok")); got != 1 {
		t.Errorf("ok rounds on etcd: %v, want 1", got)
	}

	// Each finding is an Event on its pods and their nodes; posted again
	// the next period, the same Event counts twice.
	events := admindetect.EventsFor(r, pods)
	for round := 1; round <= 2; round++ {
		if err := admindetect.Post(ctx, srv.Client(), events, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int32{}
	list, err := srv.Client().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Source.Component == admindetect.Component {
			got[e.InvolvedObject.Kind+" "+e.InvolvedObject.Name+" "+e.Reason] = e.Count
		}
	}
	wantEvents := map[string]int32{"Pod a SharedPodAddress": 2, "Pod b SharedPodAddress": 2, "Node n1 SharedPodAddress": 2, "Node n2 SharedPodAddress": 2,
		"Pod c CalicoAnnotationMismatch": 2, "Node n1 CalicoAnnotationMismatch": 2}
	if !maps.Equal(got, wantEvents) {
		t.Errorf("Events %v, want %v", got, wantEvents)
	}

	kc, err := srv.User("no-pods", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	refused, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if pods, err := admindetect.ReadPods(ctx, refused, 0); err == nil {
		t.Fatalf("an identity that may not list pods read %d pods and no error", len(pods))
	}
}

// A round posts Events for at most EventsPerKind findings of a kind.
func TestEventsPerKindAreBounded(t *testing.T) {
	var r detect.Report
	for i := 0; i < admindetect.EventsPerKind+10; i++ {
		r.Findings = append(r.Findings, detect.Finding{Kind: detect.GoneOwner, Address: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Pods: []string{"default/gone"}, Nodes: []string{"n1"}})
	}
	if got := len(admindetect.EventsFor(r, nil)); got != admindetect.EventsPerKind {
		t.Errorf("%d Events for %d findings, want %d (one on the node each)", got, len(r.Findings), admindetect.EventsPerKind)
	}
}
