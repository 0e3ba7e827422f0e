package detect_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	admindetect "github.com/safe-ipam/safe-ipam/ipam/admin/detect"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

// A round reads, judges and reports: an address Calico holds for a pod
// the API server no longer has is a gone-owner finding once the grace
// passed between two rounds (a log line and a metric; the pod has no
// Event to take, its node has); a round whose allocations could not be
// read leaves the kind unknown and keeps its count.
func TestRound(t *testing.T) {
	srv := kubetest.Start(t)
	ctx := context.Background()
	if _, err := srv.RunPod("default", "a", "n1", "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	leak := detect.Allocation{Addr: netip.MustParseAddr("10.0.0.5"), Handle: "k8s-pod-network.old", Namespace: "default", Pod: "gone", Node: "n1"}
	live := detect.Allocation{Addr: netip.MustParseAddr("10.0.0.1"), Handle: "k8s-pod-network.a", Namespace: "default", Pod: "a", Node: "n1"}
	var readErr error
	var log bytes.Buffer
	m := admindetect.NewMetrics(prometheus.NewRegistry())
	s := admindetect.Sources{Kube: srv.Client(), LeakGrace: time.Nanosecond, Metrics: m, Log: slog.New(slog.NewTextHandler(&log, nil)),
		Allocations: func(context.Context) ([]detect.Allocation, error) { return []detect.Allocation{leak, live}, readErr }}
	gone := detect.NewGone()
	if n, _ := admindetect.Round(ctx, s, gone).Count(detect.GoneOwner); n != 0 {
		t.Fatalf("the first round that misses the owner reports it: %d", n)
	}
	time.Sleep(time.Millisecond)
	if n, known := admindetect.Round(ctx, s, gone).Count(detect.GoneOwner); n != 1 || !known {
		t.Fatalf("the round after the grace: %d gone owners (known %v), want 1\n%s", n, known, log.String())
	}
	if !strings.Contains(log.String(), "kind=gone-owner address=10.0.0.5") {
		t.Errorf("no log line names the finding:\n%s", log.String())
	}
	events, err := srv.Client().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=n1"})
	if err != nil || len(events.Items) != 1 || events.Items[0].Reason != admindetect.Reasons[detect.GoneOwner] {
		t.Errorf("the node's Events: %+v, %v; want one %s", events, err, admindetect.Reasons[detect.GoneOwner])
	}
	readErr = errors.New("etcd does not answer")
	if _, known := admindetect.Round(ctx, s, gone).Count(detect.GoneOwner); known {
		t.Error("a round that could not read the allocations judged the owners")
	}
	if got := testutil.ToFloat64(m.Findings.WithLabelValues(string(detect.GoneOwner))); got != 1 {
		t.Errorf("gone-owner findings after an unknown round: %v, want the last known 1", got)
	}
	if got := testutil.ToFloat64(m.Unknown.WithLabelValues(string(detect.GoneOwner))); got != 1 {
		t.Errorf("gone-owner unknown: %v, want 1", got)
	}
}

// What a round's first look finds of the confirmed kinds is looked at
// again a settle time later: an early release the second look no longer
// sees (the listings were read at two instants: a pod that started
// between them) is not reported; one it sees again is.
func TestRoundLooksAgain(t *testing.T) {
	srv := kubetest.Start(t)
	ctx := context.Background()
	for _, p := range []struct{ name, ip string }{{"started", "10.0.0.2"}, {"freed", "10.0.0.3"}} {
		if _, err := srv.RunPod("default", p.name, "n1", p.ip); err != nil {
			t.Fatal(err)
		}
		annotate(t, srv, p.name, p.ip+"/32")
	}
	other := detect.Allocation{Addr: netip.MustParseAddr("10.0.0.9"), Handle: "k8s-pod-network.o", Namespace: "default", Pod: "other", Node: "n1"}
	started := detect.Allocation{Addr: netip.MustParseAddr("10.0.0.2"), Handle: "k8s-pod-network.s", Namespace: "default", Pod: "started", Node: "n1"}
	looks := 0
	var log bytes.Buffer
	s := admindetect.Sources{Kube: srv.Client(), Settle: 10 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&log, nil)),
		Allocations: func(context.Context) ([]detect.Allocation, error) {
			looks++
			if looks == 1 {
				return []detect.Allocation{other}, nil
			}
			return []detect.Allocation{other, started}, nil
		}}
	r := admindetect.Round(ctx, s, detect.NewGone())
	if looks != 2 {
		t.Fatalf("Calico's allocations read %d times, want 2 (a second look)", looks)
	}
	var got []string
	for _, f := range r.Findings {
		got = append(got, string(f.Kind)+" "+strings.Join(f.Pods, ","))
	}
	if want := "early-release default/freed"; len(got) != 1 || got[0] != want {
		t.Errorf("findings %v, want [%s]\n%s", got, want, log.String())
	}
}

// annotate gives the pod Calico's annotation.
func annotate(t *testing.T, srv *kubetest.Server, name, value string) {
	t.Helper()
	ctx := context.Background()
	p, err := srv.Client().CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{detect.AnnotationPodIPs: value}
	if _, err := srv.Client().CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
